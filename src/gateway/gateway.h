// Gateway: the `drover gateway` process in one object -- io threads (one io_context each), per
// listener a TcpProxy with one Upstream or an HttpProxy with one Upstream per route, and the
// admin port (GW-5):
//   GET /metrics          Prometheus text: per listener (connections, HTTP requests, retries,
//                         pools) and per instance (active, connections, requests, failures,
//                         health, ejections); routing table version; discovery age
//   GET /admin/snapshot   JSON: every listener's (or route's) routing table version and
//                         instances (state, accepting, weight, effective weight under slow
//                         start and time since READY, active connections, connections and
//                         requests ever -- the dashboard's new-connection shares are deltas)
//   GET /live             200 while the process runs
//   GET /ready            200 once every listener's registry view has been answered, else 503
// Every admin response to GET/HEAD carries "Access-Control-Allow-Origin: *" (the endpoints only
// read), so the registry's dashboard can poll them from the browser.
// Shutdown(): stop accepting everywhere, let connections finish for `drain`, cut the rest, stop
// the io threads, stop discovery. Thread-safe and idempotent; the destructor calls it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "drover/clock.h"
#include "drover/status.h"
#include "gateway/config.h"

namespace drover::gateway {

class Gateway {
 public:
  // Binds every listener and the admin port and starts routing. The clock must outlive it.
  static Result<std::unique_ptr<Gateway>> Start(GatewayConfig config, Clock& clock);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // The bound port of a listener (by name); 0 if there is none.
  std::uint16_t port(const std::string& listener) const;
  std::uint16_t admin_port() const;
  const GatewayConfig& config() const;
  // "drover gateway routing zone=127.0.0.1:7000 (service zone, p2c) ...; admin http://...": every
  // listener with its bound port and what it routes to, for the first line of `drover gateway`.
  std::string RoutingLine() const;

  std::string MetricsText() const;
  std::string SnapshotJson() const;
  bool Ready() const;

  // Open client connections across all listeners.
  std::uint64_t active() const;
  void Shutdown();

  struct Impl;

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::gateway
