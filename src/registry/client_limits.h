// Per-client protection shared by the registry's HTTP and gRPC APIs (REG-8): watch streams open
// at once per client address, and writes per second per client address (a token bucket). One
// ClientLimits serves both APIs, so a client's HTTP and gRPC watches and writes count together.
//
// A write rate of 0 is no limit (the default): a fleet behind one NAT address, or a benchmark on
// loopback, would otherwise be throttled as one client. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "drover/clock.h"
#include "drover/mutex.h"
#include "drover/status.h"

namespace drover::registry {

struct ClientLimitOptions {
  std::size_t max_watches_per_client = 64;
  double write_rate = 0;   // writes/s per client address; 0: no limit
  double write_burst = 0;  // bucket size; 0: twice the rate
};

class ClientLimits {
 public:
  explicit ClientLimits(ClientLimitOptions options = {}) : options_(options) {}

  const ClientLimitOptions& options() const { return options_; }

  // OK and a token taken, or RESOURCE_EXHAUSTED naming the limit.
  Status TakeWriteToken(const std::string& client);
  // OK and a watch slot taken (give it back with ReleaseWatch), or RESOURCE_EXHAUSTED.
  Status AcquireWatch(const std::string& client);
  void ReleaseWatch(const std::string& client);

  std::uint64_t rate_limited_writes() const;
  std::uint64_t refused_watches() const;

 private:
  struct Bucket {
    double tokens = 0;
    MonoTime last{};
  };

  const ClientLimitOptions options_;
  mutable Mutex mu_;
  std::map<std::string, Bucket, std::less<>> buckets_ DROVER_GUARDED_BY(mu_);
  std::map<std::string, std::size_t, std::less<>> open_watches_ DROVER_GUARDED_BY(mu_);
  std::uint64_t rate_limited_writes_ DROVER_GUARDED_BY(mu_) = 0;
  std::uint64_t refused_watches_ DROVER_GUARDED_BY(mu_) = 0;
};

// The client's address in a gRPC peer string: "ipv4:127.0.0.1:5000" -> "127.0.0.1",
// "ipv6:[::1]:5000" -> "::1"; anything else is returned whole.
std::string ClientAddressOfPeer(std::string_view peer);

}  // namespace drover::registry
