// Producer and waiter (JOB-2, JOB-3, JOB-5): where the result of one step of one job lives and
// where its nudge is published; PublishResult on the producer's side; on the consumer's side
// Wait, in destructive or at-least-once mode, and Acknowledge. Free functions over a ResultStore
// and a Clock the caller owns, which must outlive the call. Thread-safe: any number of calls may
// run at once on one store; each Wait runs on its caller's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <stop_token>
#include <string>
#include <string_view>

#include "drover/clock.h"
#include "drover/jobs/classify.h"
#include "drover/jobs/result_store.h"
#include "drover/jobs/sanitize.h"
#include "drover/jobs/step_result.h"
#include "drover/status.h"

namespace drover::jobs {

// Where the result of one step of one job lives, and where its nudge is published.
std::string ResultKey(const std::string& job_id, const std::string& step);
std::string NudgeChannel(const std::string& job_id, const std::string& step);

// Producer side (JOB-2): writes the result with its TTL in one SET, then publishes the nudge.
// The write comes first: a waiter woken by the nudge always finds the value. The nudge is best
// effort -- the write is what counts; a lost nudge costs a waiter at most one tick -- so only a
// failed write is an error.
Status PublishResult(ResultStore& store, const std::string& job_id, const std::string& step,
                     const StepResult& result, Duration ttl = std::chrono::hours(1));

enum class ReadMode : std::uint8_t {
  // GETDEL: the value is gone once read, so whatever it says is final -- the waiter never waits
  // again after a read returned a value.
  kDestructive = 0,
  // GET; the caller commits what it got, then calls Acknowledge (DEL). A waiter that dies in
  // between loses nothing: the next Wait reads the same value again.
  kAtLeastOnce = 1,
};

struct WaitOptions {
  ReadMode mode = ReadMode::kDestructive;
  Duration tick = std::chrono::seconds(1);     // poll period, nudge or not
  Duration timeout = std::chrono::minutes(5);  // the wait's hard ceiling
  SanitizeOptions sanitize;
  // At-least-once mode: whether the caller already committed the delivery with this id (a
  // waiter that died after its commit but before Acknowledge reads the same value again). When
  // it says yes, the value is removed and the outcome is marked `duplicate`: nothing to do.
  std::function<bool(const std::string& delivery_id)> already_committed;
};

struct WaitOutcome {
  enum class Kind : std::uint8_t {
    kDone = 0,
    kStepError = 1,      // the producer says the step failed: `message` is its sanitized text
    kProtocolError = 2,  // a value that breaks the contract: `message` says how
    kTimeout = 3,        // nothing final by the ceiling: `message` says what was last seen
    kCancelled = 4,
  };
  Kind kind = Kind::kTimeout;
  std::string content;     // kDone
  std::string message;     // see Kind
  bool retryable = false;  // kStepError: the producer's word
  ReadClass last_seen = ReadClass::kNotReady;
  int reads = 0;        // reads done, nudged or ticked
  bool nudged = false;  // the final read followed a nudge
  Duration waited{};
  // kDone, kStepError, kProtocolError: identifies the value read (a hash of it), for the
  // caller's idempotent commit in at-least-once mode.
  std::string delivery_id;
  bool duplicate = false;  // at-least-once: already committed (see WaitOptions); removed now
};
std::string_view WaitOutcomeName(WaitOutcome::Kind kind);  // "done", "step_error", ...

// Waits for the result of `step` of `job_id` (JOB-3, JOB-5): subscribes to its nudge, reads
// once at once, then on every nudge and every `tick`, until a read is terminal, the timeout
// passes, or `stop` is requested. Every read goes through Classify.
WaitOutcome Wait(ResultStore& store, Clock& clock, const std::string& job_id,
                 const std::string& step, const WaitOptions& options, std::stop_token stop = {});

// At-least-once mode: after the caller committed the outcome, removes the result.
Status Acknowledge(ResultStore& store, const std::string& job_id, const std::string& step);

}  // namespace drover::jobs
