// XdsServer: the registry's xDS listener (`drover registry --xds host:port`) -- the aggregated
// discovery service (ADS, state of the world, xDS v3) that proxyless gRPC clients in any language
// follow with `xds:///<service>` and a bootstrap naming this address. What it serves and how one
// stream behaves are in xds_resources.h.
//
// Read-only and unauthenticated: gRPC 1.51's bootstrap gives clients only insecure or
// google_default channel credentials and no call credentials, so there is nothing to check a
// token with. It serves READY/DRAINING endpoint data only, binds where told (loopback unless
// --xds says otherwise), admits only peers in `allow` when that is set, and bounds the streams
// per client connection and in all.
//
// Threads: gRPC's own for the streams (the callback API; no thread per stream), and one
// publisher that follows the registry through a Watcher (from a RESYNC, then every change),
// rebuilds the changed services' resources, publishes an immutable snapshot and tells every
// stream; a stream with something new for its client writes it at once. A change reaches the
// clients within one write's time of the registry applying it.
//
// Thread-safety: Start() and the getters from any thread; Stop() (idempotent) from any thread but
// the server's own. The Registry must outlive the server.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/cidr.h"
#include "drover/status.h"

namespace drover::registry {

class Registry;

struct XdsCounters {
  std::atomic<std::uint64_t> streams{0};          // open now
  std::atomic<std::uint64_t> refused_streams{0};  // not allowed, or over a limit
  std::atomic<std::uint64_t> responses{0};
  std::atomic<std::uint64_t> nacks{0};
  std::atomic<std::uint64_t> version{0};  // of the newest snapshot
};

struct XdsOptions {
  std::string address;                     // "ip:port"; port 0: any free port
  std::vector<Cidr> allow;                 // empty: every peer that can connect
  std::size_t max_streams_per_client = 8;  // per client connection (one xDS client holds one)
  std::size_t max_streams = 10'000;
  // Where the server counts (the registry's /metrics reads them); null: its own.
  std::shared_ptr<XdsCounters> counters;
};

class XdsServer {
 public:
  static Result<std::unique_ptr<XdsServer>> Start(Registry& registry, XdsOptions options);
  ~XdsServer();  // Stop()
  XdsServer(const XdsServer&) = delete;
  XdsServer& operator=(const XdsServer&) = delete;

  int port() const;
  const XdsCounters& counters() const;
  // Ends every stream (UNAVAILABLE: clients reconnect elsewhere), stops the publisher and the
  // gRPC server.
  void Stop();

  struct Impl;

 private:
  explicit XdsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::registry
