// The dispatcher (JOB-7, JOB-8): runs one step of one job on the compute service -- claims the
// job, picks a node, submits, waits, and retries on another node within the retry budget --
// with the two callbacks it is given (where nodes come from, how a step is handed to a node).
// A Dispatcher owns those callbacks, its options, and the per-node breakers and in-flight counts;
// it holds references to a ResultStore and a Clock the caller owns, which must outlive it.
// Thread-safe: any number of Run() calls at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "drover/clock.h"
#include "drover/jobs/circuit_breaker.h"
#include "drover/jobs/result_store.h"
#include "drover/jobs/waiter.h"
#include "drover/status.h"

namespace drover::router {
class RoutingTable;
struct Endpoint;
}  // namespace drover::router

namespace drover::jobs {

// Where compute nodes come from: a routing table of the compute service (a DiscoveryClient's
// snapshot: READY and accepting instances are Routable()).
using NodeSource = std::function<Result<std::shared_ptr<const router::RoutingTable>>()>;
// Hands one step of one job to one node. An error is a transport failure (the node did not take
// it); the node's answer comes later, through the ResultStore.
using Submit = std::function<Status(const router::Endpoint& node, const std::string& job_id,
                                    const std::string& step, const std::string& payload)>;

struct DispatchOptions {
  int max_retries = 2;  // attempts after the first, shared by every consumer of the job (JOB-6)
  WaitOptions wait;     // each attempt's wait; its timeout is the budget's hard ceiling
  BreakerOptions breaker;
  Duration state_ttl = std::chrono::hours(24);  // of the job's state key
};

struct DispatchResult {
  enum class End : std::uint8_t {
    kDone = 0,
    kFailed = 1,            // a step error that is final, or the budget is spent
    kNoNode = 2,            // no node (or no other node, for a retry) can take it
    kClaimedElsewhere = 3,  // another consumer owns the job, or moved it on first
    kCancelled = 4,
  };
  End end = End::kFailed;
  std::string reason;              // user-facing: sanitized, never a raw payload
  WaitOutcome last;                // the last attempt's wait
  std::vector<std::string> nodes;  // tried, in order
};
std::string_view DispatchEndName(DispatchResult::End end);

// Runs one step of one job on the compute service (JOB-7, JOB-8): claims the job by
// compare-and-set on `job:{id}:step` ("" -> "attempt:1"), picks a node by P2C over in-flight
// calls among routable nodes whose breaker lets a call through, submits, and waits for the
// result. A final step error ends it; a retryable step error, a protocol error, a timeout or a
// transport failure retries -- on a node not tried yet, within the retry budget, after moving
// the state on by compare-and-set ("attempt:n" -> "attempt:n+1"), so two consumers can never both
// requeue, nor both give up. The end is written the same way ("done", "failed", "cancelled").
// Thread-safe: any number of jobs at once share the breakers and the in-flight counts.
class Dispatcher {
 public:
  Dispatcher(ResultStore& store, NodeSource nodes, Submit submit, Clock& clock,
             DispatchOptions options = {});
  ~Dispatcher();

  DispatchResult Run(const std::string& job_id, const std::string& step, const std::string& payload,
                     std::stop_token stop = {});

  CircuitBreaker::State BreakerState(const std::string& node_id);

  // The key of a job step's state.
  static std::string StateKey(const std::string& job_id, const std::string& step);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::jobs
