// HttpProxy: one HTTP/1.1 listener of the gateway (GW-1, GW-2, GW-4). A client connection waiting
// for its next request holds no coroutine: it is parked in a readiness wait, on its worker's idle
// list (closed after idle_timeout). When bytes come, a coroutine reads request after request
// while there are some (keep-alive, pipelining), parks the connection again, and for each:
//   1. parses the head in place and validates it (http1.h: strict framing, HTTP/1.0 or 1.1;
//      http_check.h: origin-form target, Host on 1.1); bad input is answered 400 (431 for a head
//      over max_header_bytes) and the connection closed -- the listener keeps serving everyone
//      else;
//   2. routes by the longest matching path prefix (404 when none matches), picks an instance on
//      the route's Upstream (p2c, or hash on the route's key header);
//   3. takes a pooled keep-alive connection to the instance or connects (connect_timeout), drops
//      hop-by-hop headers (Connection and what it names, Keep-Alive, Proxy-Connection, TE,
//      Trailer, Upgrade), appends the client's address to X-Forwarded-For, answers an
//      `Expect: 100-continue` itself, and streams the body as it comes, 64 KiB reads at most
//      (chunked stays chunked, Content-Length stays as sent: bodies of any size, never held
//      whole, the payload never copied); a small request is one write of head and body;
//   4. waits for the response head up to the route's response_timeout (504), streams the
//      response back the same way (a response framed by connection close is re-framed chunked
//      for HTTP/1.1 clients), and returns the upstream connection to the pool when both sides
//      allow keep-alive.
// Retries go to a different instance, at most route.retries times, each one only while the
// listener's RetryBudget allows: after a failed connect (always safe: nothing was sent), and
// for idempotent requests whose body was not yet streamed when the connection failed before any
// response byte arrived (a pooled connection the upstream closed meanwhile). A request is never
// retried after a timeout or after part of its body was sent. Connect failures, resets, timeouts
// and 5xx answers feed the instance's outlier ejection.
//
// Threads: net::TcpListener accepts on every worker (io_contexts run by one thread each; the
// connection limit -- a 503 over it -- and close-all are its), and a connection is served by the
// worker that accepted it, or the least loaded one when that holds more than its share; a
// connection, its upstream connections and its thread's UpstreamPool never
// meet another thread, so a pooled connection moves between client connections without a system
// call. A sweeper per worker closes pooled connections past their idle timeout or age.
#pragma once

#include <memory>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"
#include "gateway/config.h"
#include "gateway/listener.h"
#include "gateway/upstream_pool.h"

namespace drover::net {
class TcpListener;
}  // namespace drover::net

namespace drover::gateway {

class Upstream;

class HttpProxy final : public Listener {
 public:
  // Binds `config.address`; `routes[i]` is the Upstream of `config.routes[i]`. Each worker must be
  // run by exactly one thread. The upstreams and the clock must outlive the proxy and every
  // connection it accepted.
  static Result<std::unique_ptr<HttpProxy>> Start(const Workers& workers,
                                                  const ListenerConfig& config,
                                                  std::vector<Upstream*> routes, Clock& clock);
  ~HttpProxy() override;
  HttpProxy(const HttpProxy&) = delete;
  HttpProxy& operator=(const HttpProxy&) = delete;

  std::uint16_t port() const override;
  const net::ConnectionCounters& connections() const override;
  const ListenerCounters& counters() const override;
  void StopAccepting() override;
  void CloseAll() override;
  UpstreamPool::Stats pool_stats() const;

  struct State;

 private:
  HttpProxy(std::shared_ptr<State> state, std::unique_ptr<net::TcpListener> listener);
  std::shared_ptr<State> state_;
  std::unique_ptr<net::TcpListener> listener_;  // accepts; its connections share state_
};

}  // namespace drover::gateway
