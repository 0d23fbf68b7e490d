// The sanitizer for producer error text (JOB-9): what a compute node says about a failed step,
// made fit for a user-facing field. A pure function: the input is only read, the output is the
// caller's; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace drover::jobs {

struct SanitizeOptions {
  std::size_t max_bytes = 512;  // of the output, "..." included
};

// Producer error text made fit for a user-facing field (JOB-9), in this order:
//   1. invalid UTF-8 repaired (each bad sequence becomes U+FFFD);
//   2. control characters, terminal escape sequences and bidi overrides/isolates removed (tab,
//      CR and LF become a space);
//   3. URLs and file paths redacted ("[url]", "[path]") -- before truncation, so a URL cut by the
//      limit cannot leak its first half;
//   4. truncated to max_bytes on a character boundary, ending in "...".
std::string SanitizeErrorText(std::string_view text, const SanitizeOptions& options = {});

}  // namespace drover::jobs
