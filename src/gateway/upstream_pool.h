// UpstreamPool: idle keep-alive connections to upstream instances, for the HTTP proxy.
//
// One pool per io thread (an io_context run by one thread): a pooled socket stays registered with
// its thread's reactor, so taking and returning one costs no system call. Connections are keyed
// by instance ("id@address", so an id that
// comes back at another address never gets the old one's sockets) and carry their creation time:
//   - a connection past its max age is closed instead of reused. The age is jittered per
//     connection (+-10%) so a fleet of connections made together does not reconnect in step. Age
//     bounds how long a request stream stays on one instance after the table changed, as gRPC's
//     max connection age does (seed 003);
//   - a connection unused for idle_timeout is closed by Sweep();
//   - Take() checks that the peer has not closed the connection while it sat idle (a
//     non-blocking peek), which catches most stale keep-alive connections before a request is
//     written to them; the proxy's retry covers the rest. A caller that can send its request
//     again unharmed (idempotent, held whole) skips the peek -- a system call per request -- and
//     reports a connection it then finds closed with FoundClosed(); a connection whose last
//     response had no body by rule is peeked at all the same (Put's check_before_reuse).
// Used by its own thread only, without a lock; stats() may be read from any (relaxed counters).
#pragma once

// clang-format off
#include "net/sockets.h"  // first: it includes <utility> before Asio
// clang-format on

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "drover/clock.h"

namespace drover::gateway {

class UpstreamPool {
 public:
  struct Options {
    Duration max_age = std::chrono::seconds(60);  // zero: no limit
    Duration idle_timeout = std::chrono::seconds(30);
    std::size_t max_idle_per_key = 128;
  };
  struct Stats {
    std::uint64_t idle = 0;            // connections in the pool now
    std::uint64_t reused = 0;          // Take() hits
    std::uint64_t retired_age = 0;     // closed at their max age
    std::uint64_t retired_idle = 0;    // closed after idle_timeout unused
    std::uint64_t retired_closed = 0;  // found closed by the peer (or with stray bytes)
    std::uint64_t overflow = 0;        // closed because the key's idle list was full
  };

  explicit UpstreamPool(Options options) : options_(options) {}
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // When a connection created at `now` must be retired (jittered max age); max() for no limit.
  MonoTime RetireAt(MonoTime now);

  // A live idle connection for `key` (the most recently used: warm, and lets the others idle
  // out), or nullopt. Expired or closed ones met on the way are closed. Without `check_closed`
  // a connection the peer closed is not looked for: the caller finds out by using it.
  std::optional<boost::asio::ip::tcp::socket> Take(const std::string& key, MonoTime now,
                                                   MonoTime* retire_at, bool check_closed = true);
  // A connection Take() gave without the check was found closed by the peer before it carried
  // anything: counted as retired_closed, not as reused.
  void FoundClosed() {
    Bump(stats_.reused, -1);
    Bump(stats_.retired_closed);
  }
  // Gives a connection back after a complete exchange; closes it instead when it is past its
  // age or the key's list is full. `check_before_reuse`: the next Take() peeks at it even when
  // asked not to -- for a connection whose last response had no body by rule (HEAD, 204, 304),
  // where an upstream that sends one anyway leaves bytes that would be read as the next answer.
  void Put(const std::string& key, boost::asio::ip::tcp::socket socket, MonoTime retire_at,
           MonoTime now, bool check_before_reuse = false);
  // Closes the connections idle for idle_timeout or past their age. Returns how many.
  std::size_t Sweep(MonoTime now);

  Stats stats() const;

 private:
  struct Idle {
    boost::asio::ip::tcp::socket socket;
    MonoTime retire_at;
    MonoTime idle_since;
    bool check = false;  // Take() peeks whatever it is asked
  };
  struct Counters {
    std::atomic<std::uint64_t> idle{0}, reused{0}, retired_age{0}, retired_idle{0},
        retired_closed{0}, overflow{0};
  };
  static void Bump(std::atomic<std::uint64_t>& c, std::int64_t by = 1) {
    c.store(c.load(std::memory_order_relaxed) + static_cast<std::uint64_t>(by),
            std::memory_order_relaxed);  // one writer: no read-modify-write needed
  }
  const Options options_;
  // The back of each list was returned most recently.
  std::map<std::string, std::deque<Idle>> idle_;
  Counters stats_;
};

}  // namespace drover::gateway
