// The gRPC channel every SDK client opens to the registry (ServerHost, DiscoveryClient, and
// through them the gateway), so that all of them accept the same registry addresses:
//
//   host:port            plaintext, unless a CA file is given
//   grpc://host:port     plaintext (a CA file with it is an error: it would be ignored)
//   grpcs://host:port    TLS; the registry's certificate is checked against the CA file, or
//                        against the system's trust store when none is given
//
// The certificate must name the host the client dials (DNS or IP subject alternative name).
//
// Wherever a registry is named it may be several, comma-separated ("10.0.0.1:7071,10.0.0.2:7071",
// each in any of the forms above): the registries of one etcd-backed cluster. A client talks to
// one at a time and fails over to the next (sdk/registry_failover.h). A DNS name with several A
// records is one endpoint whose addresses gRPC tries in turn, re-resolving the name on failure.
// Every channel reconnects with gRPC's backoff capped at one second, so a registry that comes back
// is reached again within about a second, not after gRPC's default of up to two minutes, and
// takes answers up to kMaxRegistryAnswer (gRPC's default of 4 MiB is about 40,000 instances).
#pragma once

#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace drover::sdk {

// The largest answer a registry channel accepts (a List or RESYNC of a large service).
inline constexpr int kMaxRegistryAnswer = 256 << 20;

struct RegistryTarget {
  std::string address;  // host:port, for gRPC
  bool tls = false;
};

// INVALID_ARGUMENT for an empty address, an unknown scheme or grpc:// with a CA file.
Result<RegistryTarget> ParseRegistryTarget(const std::string& registry, const std::string& ca_file);

// The entries of a comma-separated list, trimmed of spaces (empty ones kept).
std::vector<std::string> SplitRegistries(std::string_view registries);

// The endpoints of a comma-separated list, each parsed as above; INVALID_ARGUMENT naming the bad
// one, or for an empty list or an empty entry.
Result<std::vector<RegistryTarget>> ParseRegistryTargets(const std::string& registries,
                                                         const std::string& ca_file);

// The address rule, for an instance's advertised `address` and its health probe address (`what`
// names which): an address in 127.0.0.0/8 or ::1 (or "localhost") may be registered only with
// registries that are all reached at such an address too, since anyone else dialing it would
// reach themselves. FAILED_PRECONDITION naming the address and the first registry that is not
// loopback; OK otherwise, and for input that does not parse (its own check reports it).
Status CheckAdvertisable(std::string_view what, const std::string& address,
                         const std::string& registries, const std::string& ca_file);

// The channel to one registry endpoint, shared by every client of this process that names the
// same endpoint and CA file (one connection per registry, and one reconnect schedule).
// INVALID_ARGUMENT as above, or when the CA file cannot be read or holds no PEM certificate.
Result<std::shared_ptr<grpc::Channel>> RegistryChannel(const std::string& registry,
                                                       const std::string& ca_file);

// One channel per endpoint of the list, in its order (channels connect when first used).
Result<std::vector<std::shared_ptr<grpc::Channel>>> RegistryChannels(const std::string& registries,
                                                                     const std::string& ca_file);

// Waits until `channel` is connected (true), `timeout` passes or `stop` is requested, asking it
// to connect. Use it in place of a plain sleep before retrying a registry that did not answer:
// gRPC's synchronous API moves a connection attempt forward only while some thread polls the
// channel, and a call that fails fast on a channel in TRANSIENT_FAILURE polls for no time at
// all -- the attempt then waits for gRPC's backup poller (every 5 s), and a restarted registry
// stays "refused" for seconds after it is back.
bool AwaitRegistry(grpc::Channel& channel, Duration timeout, std::stop_token stop = {});

}  // namespace drover::sdk
