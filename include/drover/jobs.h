// Job results (seed 001; JOB-1 .. JOB-9): how a backend learns what became of a step it handed to a
// compute node -- without ever mistaking a failure for "not ready yet".
//
// The parts that are pure logic:
//   - the result payload contract and its allow-list parser: `done` is success, `error` is a step
//     error, anything else is a protocol error -- nothing unknown is success (JOB-4);
//   - the classification every read goes through: NOT_READY (wait), TRANSIENT (wait),
//     TERMINAL (stop now) (JOB-3);
//   - the sanitizer for producer error text (JOB-9);
//   - the per-node circuit breaker that tells a failed job from a failed node (JOB-7).
// On top of it, over a ResultStore (Redis, or embedded in-process): the producer's
// PublishResult, the waiter, and the retry budget.
//
// This header includes every header of drover/jobs/, one concept each: step_result.h (payload and
// parser), classify.h, sanitize.h, result_store.h (Subscription, ResultStore), embedded_store.h,
// redis_store.h, waiter.h (PublishResult, keys, Wait, Acknowledge), retry_budget.h,
// circuit_breaker.h and dispatcher.h; code that uses one concept can include just its header.
#pragma once

// No jobs header uses <map> any more, but this header always included it and some of its
// includers rely on that for their own std::map; kept so that they compile unchanged.
#include <map>

#include "drover/jobs/circuit_breaker.h"
#include "drover/jobs/classify.h"
#include "drover/jobs/dispatcher.h"
#include "drover/jobs/embedded_store.h"
#include "drover/jobs/redis_store.h"
#include "drover/jobs/result_store.h"
#include "drover/jobs/retry_budget.h"
#include "drover/jobs/sanitize.h"
#include "drover/jobs/step_result.h"
#include "drover/jobs/waiter.h"
