#include "drover/status.h"

#include <array>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

namespace drover {

std::string_view StatusCodeName(StatusCode code) {
  static constexpr std::array<std::string_view, 17> kNames = {
      "OK",
      "CANCELLED",
      "UNKNOWN",
      "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED",
      "NOT_FOUND",
      "ALREADY_EXISTS",
      "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION",
      "ABORTED",
      "OUT_OF_RANGE",
      "UNIMPLEMENTED",
      "INTERNAL",
      "UNAVAILABLE",
      "DATA_LOSS",
      "UNAUTHENTICATED",
  };
  const auto index = static_cast<std::size_t>(code);
  return index < kNames.size() ? kNames[index] : std::string_view("UNKNOWN_CODE");
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, std::move(msg));
}

namespace internal {

void DieOnBadResultAccess(const Status& status) {
  std::fprintf(stderr, "drover: value() of a Result holding an error: %s\n",
               status.ToString().c_str());
  std::abort();
}

}  // namespace internal
}  // namespace drover
