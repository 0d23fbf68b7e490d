// Read classification (JOB-3): every read of a result goes through Classify, which tells waiting
// (NOT_READY, TRANSIENT) from stopping now (TERMINAL), so that a failure is never mistaken for
// "not ready yet". Pure functions over their arguments: nothing owned, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "drover/status.h"

namespace drover::jobs {

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

}  // namespace drover::jobs
