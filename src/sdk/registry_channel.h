// The gRPC channel every SDK client opens to the registry (ServerHost, DiscoveryClient, and
// through them the gateway), so that all of them accept the same registry addresses:
//
//   host:port            plaintext, unless a CA file is given
//   grpc://host:port     plaintext (a CA file with it is an error: it would be ignored)
//   grpcs://host:port    TLS; the registry's certificate is checked against the CA file, or
//                        against the system's trust store when none is given
//
// The certificate must name the host the client dials (DNS or IP subject alternative name).
#pragma once

#include <memory>
#include <string>

#include "drover/status.h"

namespace grpc {
class Channel;
class ChannelArguments;
}  // namespace grpc

namespace drover::sdk {

struct RegistryTarget {
  std::string address;  // host:port, for gRPC
  bool tls = false;
};

// INVALID_ARGUMENT for an empty address, an unknown scheme or grpc:// with a CA file.
Result<RegistryTarget> ParseRegistryTarget(const std::string& registry, const std::string& ca_file);

// INVALID_ARGUMENT as above, or when the CA file cannot be read or holds no PEM certificate.
// `args`, when given, configure the channel.
Result<std::shared_ptr<grpc::Channel>> RegistryChannel(
    const std::string& registry, const std::string& ca_file,
    const grpc::ChannelArguments* args = nullptr);

}  // namespace drover::sdk
