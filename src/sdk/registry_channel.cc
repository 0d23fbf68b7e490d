#include "sdk/registry_channel.h"

#include <grpcpp/grpcpp.h>

#include <fstream>
#include <map>
#include <sstream>

#include "common/host_port.h"
#include "drover/mutex.h"

namespace drover::sdk {

namespace {

// The process's channels to registries, by endpoint and CA file: every client in a process shares
// one connection per registry endpoint (a gateway with a hundred routes keeps one, not a hundred).
// Sharing the channel, not only gRPC's subchannels, also keeps each connection under one
// pick_first policy, which reconnects promptly after a restart.
struct ChannelCache {
  Mutex mu;
  std::map<std::pair<std::string, std::string>, std::weak_ptr<grpc::Channel>> channels
      DROVER_GUARDED_BY(mu);
};

ChannelCache& Cache() {
  static ChannelCache* cache = new ChannelCache();  // never destroyed: used until exit
  return *cache;
}

// An IP literal goes to gRPC's static ipv4:/ipv6: resolver: a failed connection then never
// waits on a DNS re-resolution and a new address list, it only reconnects. A name keeps the
// DNS resolver, re-resolved when connections fail (a registry that moved is found again).
std::string ChannelTarget(const std::string& address) {
  const Result<HostPort> parsed = ParseHostPort(address, "registry");
  if (!parsed.ok()) return address;
  switch (parsed->kind) {
    case HostKind::kIpv4:
      return "ipv4:" + parsed->ToString();
    case HostKind::kIpv6:
      return "ipv6:" + parsed->ToString();
    case HostKind::kName:
      break;
  }
  return address;
}

Result<std::shared_ptr<grpc::Channel>> NewRegistryChannel(const std::string& registry,
                                                          const std::string& ca_file) {
  DROVER_ASSIGN_OR_RETURN(const RegistryTarget target, ParseRegistryTarget(registry, ca_file));
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (!target.tls) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    if (!ca_file.empty()) {
      std::ifstream in(ca_file);
      if (!in) return InvalidArgumentError("cannot read the registry CA file " + ca_file);
      std::stringstream pem;
      pem << in.rdbuf();
      ssl.pem_root_certs = pem.str();
      if (ssl.pem_root_certs.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
        return InvalidArgumentError("the registry CA file " + ca_file +
                                    " holds no PEM certificate");
      }
    }
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments channel_args;
  // A registry that restarts is reached again within about a second (gRPC's default backoff
  // grows to two minutes, longer than any lease).
  channel_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  channel_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 500);
  // A List or RESYNC of a large service is one message: over gRPC's 4 MiB default from about
  // 40,000 plain instances (fewer with labels), which would leave the client with no view at
  // all. The registry is trusted; the bound only stops a runaway answer.
  channel_args.SetMaxReceiveMessageSize(kMaxRegistryAnswer);
  return grpc::CreateCustomChannel(ChannelTarget(target.address), credentials, channel_args);
}

}  // namespace

Result<std::shared_ptr<grpc::Channel>> RegistryChannel(const std::string& registry,
                                                       const std::string& ca_file) {
  ChannelCache& cache = Cache();
  MutexLock lock(cache.mu);
  std::weak_ptr<grpc::Channel>& slot = cache.channels[{registry, ca_file}];
  if (auto shared = slot.lock()) return shared;
  DROVER_ASSIGN_OR_RETURN(auto channel, NewRegistryChannel(registry, ca_file));
  slot = channel;
  return channel;
}

Result<std::vector<std::shared_ptr<grpc::Channel>>> RegistryChannels(const std::string& registries,
                                                                     const std::string& ca_file) {
  DROVER_RETURN_IF_ERROR(ParseRegistryTargets(registries, ca_file).status());
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (const std::string& one : SplitRegistries(registries)) {
    DROVER_ASSIGN_OR_RETURN(auto channel, RegistryChannel(one, ca_file));
    channels.push_back(std::move(channel));
  }
  return channels;
}

bool AwaitRegistry(grpc::Channel& channel, Duration timeout, std::stop_token stop) {
  constexpr Duration kSlice = std::chrono::milliseconds(100);  // how soon a stop is noticed
  const MonoTime deadline = MonoClock::now() + timeout;
  while (!stop.stop_requested()) {
    const MonoTime now = MonoClock::now();
    if (now >= deadline) return false;
    const Duration slice = std::min<Duration>(kSlice, deadline - now);
    if (channel.WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::duration_cast<std::chrono::microseconds>(slice))) {
      return true;
    }
  }
  return false;
}

}  // namespace drover::sdk
