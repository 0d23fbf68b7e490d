// HealthServer: `/live` and `/ready` for a server process (SDK-2), compatible with Kubernetes
// HTTP probes.
//
//   GET /live   200 "live" while the process runs -- it never checks dependencies, so a slow
//               database cannot get a healthy process restarted.
//   GET /ready  200 "ready" when `ready()` says so, else 503 with the reason (warming up, a
//               failing check by name, draining).
//   GET /metrics   what `metrics()` returns, as the Prometheus text format (404 without it).
//   anything else: 404 (unknown path) or 405 (not GET/HEAD); one request per connection.
//
// One thread, plain sockets: probes are rare and tiny, and a client that stalls is cut off by a
// 2 s socket timeout, so it cannot hold the probes of others for long. Stop() (or the destructor)
// wakes the thread at once and joins it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "drover/status.h"
#include "sdk/accept_thread.h"

namespace drover::sdk {

struct Readiness {
  bool ready = false;
  std::string reason;  // why not, for the 503 body and the logs
};

class HealthServer {
 public:
  // `address` is host:port (port 0: any free port). `ready` is called on the server's thread for
  // every /ready probe, `metrics` (optional) for every /metrics scrape; both must be quick and
  // thread-safe.
  static Result<std::unique_ptr<HealthServer>> Start(const std::string& address,
                                                     std::function<Readiness()> ready,
                                                     std::function<std::string()> metrics = {});
  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  std::uint16_t port() const { return port_; }
  void Stop();  // idempotent

 private:
  HealthServer(int listen_fd, std::uint16_t port, std::function<Readiness()> ready,
               std::function<std::string()> metrics);
  void Serve(int fd);

  int listen_fd_;  // closed by Stop(): probes are refused from then on
  const std::uint16_t port_;
  const std::function<Readiness()> ready_;
  const std::function<std::string()> metrics_;  // empty: no /metrics
  std::unique_ptr<AcceptThread> acceptor_;      // serves each probe on its thread
};

}  // namespace drover::sdk
