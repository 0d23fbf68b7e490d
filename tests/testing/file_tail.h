// The last lines of a log file, for failure messages.
#pragma once

#include <cstddef>
#include <deque>
#include <fstream>
#include <string>

namespace drover::testing {

// The last `lines` lines of the file at `path` ("" if it cannot be read).
inline std::string Tail(const std::string& path, std::size_t lines) {
  std::ifstream in(path);
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += l + "\n";
  return out;
}

}  // namespace drover::testing
