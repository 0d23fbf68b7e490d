// The gateway's YAML config: parsing (strict, errors name the key) and validation. Any input
// must end in a config or an INVALID_ARGUMENT; yaml-cpp's exceptions must not escape.
#include <cstddef>
#include <cstdint>
#include <string>

#include "gateway/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string yaml(reinterpret_cast<const char*>(data), size);
  if (auto config = drover::gateway::ParseGatewayConfig(yaml); config.ok()) {
    (void)drover::gateway::ValidateGatewayConfig(*config);
  }
  return 0;
}
