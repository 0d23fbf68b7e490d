// Job results: the producer's payload through the allow-list parser and the read
// classification, and the producer's error text through the sanitizer (whose output must be
// printable: no control characters, no escape sequences, within its length bound).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "drover/jobs.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace jobs = drover::jobs;
  const std::string input(reinterpret_cast<const char*>(data), size);
  (void)jobs::ParseStepResult(input);
  (void)jobs::Classify(
      drover::Result<std::optional<std::string>>(std::optional<std::string>(input)));
  const jobs::SanitizeOptions options;
  const std::string clean = jobs::SanitizeErrorText(input, options);
  if (clean.size() > options.max_bytes) __builtin_trap();
  for (const char c : clean) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) __builtin_trap();
  }
  return 0;
}
