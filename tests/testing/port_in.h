// Reads a port out of a child's startup line ("... listening on http://127.0.0.1:41234 ...").
#pragma once

#include <cstdint>
#include <regex>
#include <string>

namespace drover::testing {

// The first capture group of `pattern` in `line`, as a port; 0 when it does not match.
inline std::uint16_t PortIn(const std::string& line, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex(pattern))) return 0;
  return static_cast<std::uint16_t>(std::stoi(m[1].str()));
}

}  // namespace drover::testing
