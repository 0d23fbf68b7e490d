// The result payload contract (JOB-4): what a producer publishes for one step of one job, its
// encoder, and the positive allow-list parser every stored value goes through -- `done` is
// success, `error` is a step error, anything else is a protocol error; nothing unknown is success.
// Plain values and pure functions: nothing shared, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace drover::jobs {

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

}  // namespace drover::jobs
