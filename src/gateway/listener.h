// What the gateway needs of a listener, whatever it speaks: its port, its counters, and the two
// steps of a graceful shutdown.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "net/connection_counters.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace drover::gateway {

// The gateway's io threads: one io_context each, each run by exactly one thread. Listeners
// accept on each of them (net::TcpListener); a connection stays on its thread for life.
using Workers = std::vector<boost::asio::io_context*>;

// What a listener counts besides its connections (net::ConnectionCounters: accepted, active,
// refused over max_connections).
struct ListenerCounters {
  std::atomic<std::uint64_t> no_upstream{0};  // no instance could be connected (tcp: closed;
                                              // http: 502/503)
  std::atomic<std::uint64_t> bad_key{0};      // tcp: missing or malformed key line
  std::atomic<std::uint64_t> idle_timeouts{0};
  std::atomic<std::uint64_t> response_timeouts{0};  // upstream silent (tcp: closed; http: 504)
  // http
  std::atomic<std::uint64_t> requests{0};           // request heads read
  std::atomic<std::uint64_t> bad_requests{0};       // answered 400 or 431
  std::atomic<std::uint64_t> no_route{0};           // answered 404: no route for the path
  std::atomic<std::uint64_t> retries{0};            // attempts on a further instance
  std::atomic<std::uint64_t> budget_exhausted{0};   // a retry refused by the retry budget
  std::atomic<std::uint64_t> upstream_connects{0};  // new upstream connections
  std::atomic<std::uint64_t> upstream_reused{0};    // requests on a pooled connection
};

class Listener {
 public:
  virtual ~Listener() = default;
  virtual std::uint16_t port() const = 0;
  virtual const net::ConnectionCounters& connections() const = 0;
  virtual const ListenerCounters& counters() const = 0;
  // Closes the listening socket: connects are refused from here on. Idempotent. An HTTP listener
  // also closes its idle keep-alive connections and answers the rest "Connection: close".
  virtual void StopAccepting() = 0;
  // Cuts every open connection (end of a graceful shutdown's drain).
  virtual void CloseAll() = 0;
};

}  // namespace drover::gateway
