// ParseRegistryTarget, apart from the channel so that parts without gRPC (the gateway's config
// check, its fuzz target) can use it.
#include <string_view>
#include <vector>

#include "common/host_port.h"
#include "common/text.h"
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

std::vector<std::string> SplitRegistries(std::string_view registries) {
  return SplitCommaList(registries);
}

Result<std::vector<RegistryTarget>> ParseRegistryTargets(const std::string& registries,
                                                         const std::string& ca_file) {
  std::vector<RegistryTarget> targets;
  for (const std::string& one : SplitRegistries(registries)) {
    if (one.empty()) {
      return InvalidArgumentError(registries.empty()
                                      ? std::string("no registry address")
                                      : "registry list '" + registries + "' has an empty entry");
    }
    DROVER_ASSIGN_OR_RETURN(RegistryTarget target, ParseRegistryTarget(one, ca_file));
    targets.push_back(std::move(target));
  }
  return targets;
}

Status CheckAdvertisable(std::string_view what, const std::string& address,
                         const std::string& registries, const std::string& ca_file) {
  const auto host = ParseHostPort(address, what);
  if (!host.ok() || !host->IsLoopback()) return Status::Ok();
  const auto targets = ParseRegistryTargets(registries, ca_file);
  if (!targets.ok()) return Status::Ok();  // the channel reports it
  for (const RegistryTarget& target : *targets) {
    const auto registry = ParseHostPort(target.address, "registry");
    if (!registry.ok() || registry->IsLoopback()) continue;
    return FailedPreconditionError(
        "the " + std::string(what) + " " + address + " is loopback, but the registry at " +
        target.address +
        " is not: other machines would reach themselves there. Listen on a routable address, "
        "set advertise, or allow_loopback_address");
  }
  return Status::Ok();
}

}  // namespace drover::sdk
