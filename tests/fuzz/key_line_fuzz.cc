// The key-affine TCP listener's first line ("DROVER-KEY <key>"): any bytes up to the first
// newline give a key or a refusal.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gateway/key_line.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view line(reinterpret_cast<const char*>(data), size);
  line = line.substr(0, line.find('\n'));
  if (auto key = drover::gateway::ParseKeyLine(line)) {
    if (key->empty() || key->size() > drover::gateway::kMaxKeyLine) __builtin_trap();
  }
  return 0;
}
