// The compute worker's submission protocol (a stand-in for a compute service's job API), one
// line each way over TCP:
//   JOB <job_id> <step> <payload...>  ->  ACCEPTED   (the result comes later, via the store)
//   anything else                     ->  ERR <why>
// The worker then runs the step and publishes its result with jobs::PublishResult -- or, as its
// failure mode says, a step error, a retryable error, a payload that breaks the contract, or a
// crash with no result at all.
#pragma once

#include <chrono>
#include <string>

#include "drover/clock.h"
#include "drover/host.h"
#include "drover/jobs.h"

namespace drover::examples {

enum class WorkerMode { kOk, kStepError, kRetryable, kGarbage, kCrash };
Result<WorkerMode> ParseWorkerMode(const std::string& name);  // ok, step_error, retryable, ...

struct WorkerBehaviour {
  WorkerMode mode = WorkerMode::kOk;
  Duration work = std::chrono::milliseconds(50);  // how long a step takes
  Duration result_ttl = std::chrono::hours(1);
};

// Serves one submission: answers ACCEPTED, works, publishes to `store`.
void ServeComputeSession(Session& session, const std::string& instance,
                         const WorkerBehaviour& behaviour, jobs::ResultStore& store);

// The client side, for a jobs::Dispatcher's Submit: UNAVAILABLE unless the worker at `address`
// answered ACCEPTED within `timeout`.
Status SubmitJob(const std::string& address, const std::string& job_id, const std::string& step,
                 const std::string& payload, Duration timeout = std::chrono::seconds(2));

}  // namespace drover::examples
