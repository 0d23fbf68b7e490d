// Job results (seed 001; JOB-1 .. JOB-9): how a backend learns what became of a step it handed to a
// compute node -- without ever mistaking a failure for "not ready yet".
//
// This header holds the parts that are pure logic:
//   - the result payload contract and its allow-list parser: `done` is success, `error` is a step
//     error, anything else is a protocol error -- nothing unknown is success (JOB-4);
//   - the classification every read goes through: NOT_READY (wait), TRANSIENT (wait),
//     TERMINAL (stop now) (JOB-3);
//   - the sanitizer for producer error text (JOB-9);
//   - the per-node circuit breaker that tells a failed job from a failed node (JOB-7).
// The result stores (Redis, embedded), the waiter, the retry budget and the dispatcher build on it.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover::jobs {

// --- The payload ------------------------------------------------------------------------------

// What a producer publishes for one step of one job, as JSON:
//   {"status": "done",  "content": "..."}                                  success
//   {"status": "error", "retryable": false, "message": "..."}              step error
// `retryable` (bool) and `message`/`content` (strings) are optional; any other member is ignored.
struct StepResult {
  enum class Status : std::uint8_t { kDone = 0, kError = 1 };
  Status status = Status::kDone;
  bool retryable = false;
  std::string message;  // for an error: the producer's text (sanitize before showing it)
  std::string content;  // for done: the result itself
};

// The JSON a producer writes for `result`.
std::string EncodeStepResult(const StepResult& result);

// What one stored value means.
struct Parsed {
  enum class Kind : std::uint8_t {
    kDone = 0,           // status "done"
    kStepError = 1,      // status "error": the job failed, the node did its work
    kProtocolError = 2,  // anything else: the contract is broken
  };
  Kind kind = Kind::kProtocolError;
  StepResult result;    // for kDone and kStepError
  std::string problem;  // for kProtocolError: what is wrong, without the raw payload
};

// The largest payload the parser reads; a larger one is a protocol error.
inline constexpr std::size_t kMaxPayloadBytes = 1 << 20;

// Positive allow-list parsing (JOB-4): a JSON object whose "status" is the string "done" or
// "error", with fields of the right types. Missing, non-string or unknown status, invalid JSON,
// a non-object, a wrong-typed field, or more than kMaxPayloadBytes: a protocol error.
Parsed ParseStepResult(std::string_view payload);

// --- Classification ---------------------------------------------------------------------------

// Every read of a result -- from a nudge or from the ticker -- goes through Classify (JOB-3).
enum class ReadClass : std::uint8_t {
  kNotReady = 0,   // the key is absent: keep waiting
  kTransient = 1,  // the store cannot answer now (unreachable, loading): keep waiting, reconnect
  kTerminal = 2,   // a value was read: stop now, whatever it says
};
std::string_view ReadClassName(ReadClass c);  // "NOT_READY", "TRANSIENT", "TERMINAL"

// One read: the store's answer. An OK status with no value is an absent key (not ready). A value
// is terminal -- done, step error or protocol error, never "not ready", so a value read
// destructively can never be lost to a retry loop. An error is transient when the store could
// not answer (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED); any other error
// (the key holds something that is not a result, ...) is terminal, a protocol error.
ReadClass Classify(const Result<std::optional<std::string>>& read);

// --- Sanitizer ----------------------------------------------------------------------------------

struct SanitizeOptions {
  std::size_t max_bytes = 512;  // of the output, "..." included
};

// Producer error text made fit for a user-facing field (JOB-9), in this order:
//   1. invalid UTF-8 repaired (each bad sequence becomes U+FFFD);
//   2. control characters and bidi overrides/isolates removed (tab, CR and LF become a space);
//   3. URLs and file paths redacted ("[url]", "[path]") -- before truncation, so a URL cut by the
//      limit cannot leak its first half;
//   4. truncated to max_bytes on a character boundary, ending in "...".
std::string SanitizeErrorText(std::string_view text, const SanitizeOptions& options = {});

// --- Circuit breaker --------------------------------------------------------------------------

struct BreakerOptions {
  int failure_threshold = 5;  // consecutive breaker failures that open it
  Duration open_for = std::chrono::seconds(10);
  int half_open_probes = 1;  // calls let through at once while half-open
  // A probe that has not reported within this is presumed failed and its slot reclaimed, so a
  // lost probe can never wedge the breaker half-open.
  Duration probe_max_wait = std::chrono::seconds(30);
};

// How a call through the breaker ended.
enum class CallOutcome : std::uint8_t {
  kSuccess = 0,
  kStepError = 1,       // the node answered with a step error: the node is fine (not a failure)
  kProtocolError = 2,   // the node broke the contract: a failure
  kTransportError = 3,  // unreachable, timed out, crashed: a failure
  kCancelled = 4,       // the caller gave up: neither success nor failure
};

// One breaker per compute node (JOB-7). Thread-safe.
//   closed:    every call goes; `failure_threshold` failures in a row open it.
//   open:      no call goes, for `open_for`; then half-open.
//   half-open: up to `half_open_probes` calls go, as probes. A probe's success or step error
//              closes the breaker; its failure opens it again; its cancellation just frees its
//              slot. Only a probe's own report can free its slot or decide the state: a call
//              that started in an earlier state reports into nothing.
class CircuitBreaker {
 public:
  enum class State : std::uint8_t { kClosed = 0, kOpen = 1, kHalfOpen = 2 };

  // A call's ticket: pass it back to Report exactly once.
  struct Permit {
    std::uint64_t epoch = 0;  // the state the call started in
    std::uint64_t probe = 0;  // its probe slot while half-open (0: not a probe)
  };

  CircuitBreaker(BreakerOptions options, Clock& clock);

  // A permit when a call may go now; nullopt when the breaker is open or every probe slot of the
  // half-open state is taken.
  std::optional<Permit> TryAcquire();
  void Report(const Permit& permit, CallOutcome outcome);

  State state();
  int probes_in_flight();

 private:
  void Transition(State to);  // mu_ held
  void Tick();                // mu_ held: open -> half-open, expired probes reclaimed

  const BreakerOptions options_;
  Clock& clock_;
  std::mutex mu_;
  State state_ = State::kClosed;
  std::uint64_t epoch_ = 1;
  int failures_ = 0;
  MonoTime opened_at_{};
  std::uint64_t next_probe_ = 1;
  struct Probe {
    std::uint64_t id = 0;
    MonoTime started{};
  };
  std::vector<Probe> probes_;
};

std::string_view BreakerStateName(CircuitBreaker::State s);  // "closed", "open", "half-open"

}  // namespace drover::jobs
