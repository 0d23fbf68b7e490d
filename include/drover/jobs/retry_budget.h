// The retry budget (JOB-6): how many times one step of one job may be retried, counted in the
// ResultStore so that every consumer of the job shares one count. A RetryBudget holds a reference
// to a store the caller owns, which must outlive it, and owns only its key and limits. Its fields
// never change after construction and the count lives in the store, so Allow() may be called from
// any thread.
#pragma once

#include <string>

#include "drover/clock.h"
#include "drover/jobs/result_store.h"

namespace drover::jobs {

// How many times one step of one job may be retried (JOB-6). The counter is
// `retry:{job_id}:{step}`, counted and given its TTL in one atomic step; the TTL is twice the
// hard ceiling of one wait, so a counter never outlives the job nor expires while it runs.
// `job_id` is the enqueue id and `step` the compute step actually run.
class RetryBudget {
 public:
  RetryBudget(ResultStore& store, std::string job_id, std::string step, int max_retries,
              Duration wait_ceiling);
  // True when one more retry may run (and counts it): a budget of N allows exactly N. False
  // when it is spent -- or when the store cannot count: a job whose retries cannot be counted
  // must not retry, or it might retry forever.
  bool Allow();
  std::string key() const;

 private:
  ResultStore& store_;
  std::string job_id_;
  std::string step_;
  int max_retries_;
  Duration ttl_;
};

}  // namespace drover::jobs
