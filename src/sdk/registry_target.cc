// ParseRegistryTarget, apart from the channel so that parts without gRPC (the gateway's config
// check, its fuzz target) can use it.
#include <string_view>

#include "sdk/registry_channel.h"

namespace drover::sdk {

Result<RegistryTarget> ParseRegistryTarget(const std::string& registry,
                                           const std::string& ca_file) {
  RegistryTarget target;
  std::string_view rest = registry;
  if (rest.starts_with("grpcs://")) {
    target.tls = true;
    rest.remove_prefix(8);
  } else if (rest.starts_with("grpc://")) {
    if (!ca_file.empty()) {
      return InvalidArgumentError("registry " + registry +
                                  " is plaintext (grpc://) but a CA file was given; use grpcs://");
    }
    rest.remove_prefix(7);
  } else if (rest.find("://") != std::string_view::npos) {
    return InvalidArgumentError("registry " + registry +
                                ": give host:port, grpc://host:port or grpcs://host:port");
  } else {
    target.tls = !ca_file.empty();
  }
  if (rest.empty() || rest.find('/') != std::string_view::npos) {
    return InvalidArgumentError("registry '" + registry + "' is not a host:port address");
  }
  target.address = std::string(rest);
  return target;
}

}  // namespace drover::sdk
