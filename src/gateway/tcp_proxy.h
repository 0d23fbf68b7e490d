// TcpProxy: one TCP listener of the gateway (GW-1, GW-2, GW-4). Each accepted connection:
//   1. (policy hash) reads the "DROVER-KEY <key>" line within key_timeout;
//   2. picks an instance on the listener's Upstream snapshot (loaded once for the connection),
//      connects with connect_timeout, and on failure tries a different instance, up to
//      connect_attempts -- nothing has been sent upstream yet, so a retry is always safe;
//   3. copies bytes both ways (a write completes before the next read: backpressure), passes a
//      half-close on (FIN one way, the other way keeps flowing), closes both sides on an error
//      after idle_timeout without a byte either way, or (response_timeout, for request/response
//      protocols) when the upstream sends nothing for that long after the client sent data;
//      TCP keepalive on both sockets finds peers that vanished without a FIN.
// The chosen instance's counters (active, connections, connect failures) feed the next picks.
//
// Threads: net::TcpListener accepts on every one of the gateway's io_contexts (the connection
// limit, refusals and close-all are its); each connection lives on the one that accepted it, or
// the least loaded one when that holds more than its share (each has one thread, so no strand),
// served there from the accept on: the handler of its pending connect (policy hash: a coroutine
// reads the key line first), then the handlers of its two pumps and its watchdog (no coroutine
// frame).
// StopAccepting(), CloseAll() and the getters are thread-safe and must not be called from an io
// thread (StopAccepting waits for the close to happen).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "drover/clock.h"
#include "drover/status.h"
#include "gateway/config.h"
#include "gateway/listener.h"

namespace drover::net {
class TcpListener;
}  // namespace drover::net

namespace drover::gateway {

class Upstream;

class TcpProxy final : public Listener {
 public:
  // Binds `config.address` and starts accepting, spreading connections over `workers`.
  // `upstream` and `clock` must outlive the proxy and every connection it accepted (the gateway
  // stops its io_contexts first).
  static Result<std::unique_ptr<TcpProxy>> Start(const Workers& workers,
                                                 const ListenerConfig& config, Upstream& upstream,
                                                 Clock& clock);
  ~TcpProxy() override;
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  std::uint16_t port() const override;
  const net::ConnectionCounters& connections() const override;
  const ListenerCounters& counters() const override;
  void StopAccepting() override;
  void CloseAll() override;

  struct State;

 private:
  TcpProxy(std::shared_ptr<State> state, std::unique_ptr<net::TcpListener> listener);
  std::shared_ptr<State> state_;
  std::unique_ptr<net::TcpListener> listener_;  // accepts; its connections share state_
};

}  // namespace drover::gateway
