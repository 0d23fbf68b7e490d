// Per-client protection shared by the registry's HTTP and gRPC APIs (REG-8): watch streams open
// at once per client, writes per second per client (a token bucket), and a cap on watch streams
// over all clients. One ClientLimits serves both APIs, so a client's HTTP and gRPC watches and
// writes count together.
//
// Who "a client" is (ClientIdentity): with tokens checked, the token -- every process that
// presents it, from any address, counts together, and many clients behind one NAT address with
// their own tokens do not; without tokens, the connection (a gRPC channel multiplexes all of a
// process's watches on one; an HTTP watch holds its own). Never the IP address alone: a gateway
// behind NAT with many routes, or a fleet on one host, is not one client.
//
// A write rate of 0 is no limit (the default). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "drover/clock.h"
#include "drover/mutex.h"
#include "drover/status.h"

namespace drover::registry {

struct ClientLimitOptions {
  std::size_t max_watches_per_client = 1024;  // per token, or per connection without tokens
  std::size_t max_watches = 10'000;           // over every client
  double write_rate = 0;                      // writes/s per client; 0: no limit
  double write_burst = 0;                     // bucket size; 0: twice the rate
  double total_write_rate = 0;                // writes/s over every client; 0: no limit
};

// The identity limits count against: "token <name>" for a token the registry accepted, else
// "connection <peer>" (peer: the connection's ip:port).
std::string ClientIdentity(const Result<std::string>& token_name, std::string_view peer);

class ClientLimits;

// A watch slot taken with ClientLimits::AcquireWatch, given back when this goes (or at
// Release()). Moved into what holds it for the stream's life; an empty one holds nothing.
class WatchSlot {
 public:
  WatchSlot() = default;
  WatchSlot(std::shared_ptr<ClientLimits> limits, std::string client)
      : limits_(std::move(limits)), client_(std::move(client)) {}
  WatchSlot(WatchSlot&& other) noexcept
      : limits_(std::move(other.limits_)), client_(std::move(other.client_)) {}
  WatchSlot(const WatchSlot&) = delete;
  WatchSlot& operator=(const WatchSlot&) = delete;
  ~WatchSlot() { Release(); }
  void Release();

 private:
  std::shared_ptr<ClientLimits> limits_;
  std::string client_;
};

class ClientLimits {
 public:
  explicit ClientLimits(ClientLimitOptions options = {}) : options_(options) {}

  const ClientLimitOptions& options() const { return options_; }
  // Whether writes are limited at all (callers skip working out who the client is otherwise).
  bool limits_writes() const { return options_.write_rate > 0 || options_.total_write_rate > 0; }

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
  // Refills `b` (at `rate`, up to `burst`) and takes a token; false when it has none.
  static bool Take(Bucket& b, bool fresh, double rate, double burst, MonoTime now);

  const ClientLimitOptions options_;
  mutable Mutex mu_;
  std::map<std::string, Bucket, std::less<>> buckets_ DROVER_GUARDED_BY(mu_);
  std::map<std::string, std::size_t, std::less<>> open_watches_ DROVER_GUARDED_BY(mu_);
  std::size_t total_watches_ DROVER_GUARDED_BY(mu_) = 0;
  Bucket total_writes_ DROVER_GUARDED_BY(mu_);
  bool total_writes_fresh_ DROVER_GUARDED_BY(mu_) = true;
  std::uint64_t rate_limited_writes_ DROVER_GUARDED_BY(mu_) = 0;
  std::uint64_t refused_watches_ DROVER_GUARDED_BY(mu_) = 0;
};

// A gRPC peer string as the connection's address: "ipv4:127.0.0.1:5000" -> "127.0.0.1:5000",
// "ipv6:[::1]:5000" and "ipv6:%5B::1%5D:5000" (gRPC encodes the brackets) -> "[::1]:5000";
// anything else is returned whole.
std::string ConnectionOfPeer(std::string_view peer);

}  // namespace drover::registry
