// The key-affine TCP listeners' first line: "DROVER-KEY <key>" (CRLF or LF), which the gateway
// consumes and routes by. Pure, so the parser is fuzzed on its own (tests/fuzz/).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace drover::gateway {

inline constexpr std::size_t kMaxKeyLine = 512;
inline constexpr std::string_view kKeyPrefix = "DROVER-KEY ";

// `line` is what came before the first '\n'. The key, or nullopt when the line is too long,
// lacks the prefix or has an empty key.
inline std::optional<std::string> ParseKeyLine(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.size() > kMaxKeyLine || !line.starts_with(kKeyPrefix) ||
      line.size() == kKeyPrefix.size()) {
    return std::nullopt;
  }
  return std::string(line.substr(kKeyPrefix.size()));
}

}  // namespace drover::gateway
