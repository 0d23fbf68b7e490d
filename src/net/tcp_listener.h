// TcpListener: the accept loop of every Drover server -- the registry's and the agent's HTTP
// APIs, the gateway's TCP and HTTP listeners and its admin port.
//
// It binds "ip:port" and accepts in one of two ways:
//   - on a strand of one io_context, handing each connection to the executor the owner's Place
//     picks (a strand of its own, or one of several io threads);
//   - on every one of a set of io_contexts, each run by one thread (the gateway's workers): each
//     has a listening socket of its own on the address (SO_REUSEPORT: the kernel spreads new
//     connections over them, and no thread is woken for a connection another takes), and serves
//     what it accepts itself -- unless it holds more connections than chance explains
//     (internal::HandOver), when the connection goes to the least loaded context: a burst that
//     the kernel's hash spread unevenly ends even. A second
//     process cannot join the address: before the shared sockets it is bound once without
//     SO_REUSEPORT, which fails while anything else listens there.
// Serve runs on the connection's executor: at once when that is the accepting thread (no trip
// through the queue), else posted to it. It starts whatever the connection needs (a coroutine
// through Spawn(), a readiness wait, a connect) and returns; the listener itself keeps no frame
// per connection. Around that it does what each server needs the same way:
//   - a connection limit: a client over max_connections gets `refusal` (bytes written within a
//     second, e.g. an HTTP 503; nothing: closed at once) and is closed, counted as refused;
//   - accept errors (out of descriptors) pause the loop briefly instead of spinning;
//   - counters (accepted, active, refused) for the owner's metrics;
//   - StopAccepting() closes the listening sockets (new clients are refused by the kernel) and
//     tells every open connection, through the closer it registered, that the server is
//     draining; CloseAll() tells them to close now. Each connection decides what that means for
//     it (a TCP session goes on while draining; an idle HTTP keep-alive connection closes).
//
// Threads: Start() and the getters from any thread; StopAccepting() and CloseAll() from any
// thread but the io threads (StopAccepting waits until the sockets are closed, unless nothing
// runs an accepting context any more). The listener's state lives as long as the last connection
// it accepted.
#pragma once

// clang-format off
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including it
// clang-format on

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "drover/status.h"
#include "net/connection_counters.h"

namespace drover::net {

enum class CloseReason : std::uint8_t {
  kDraining,  // the listener stopped accepting: finish what is under way
  kCloseNow,  // the end of a drain: close
};

// One open connection, as its listener sees it; handed to the owner's Serve. The connection counts
// as open (counters().active, the closers StopAccepting and CloseAll run) until the last copy of
// it is destroyed -- not when Serve returns: an owner keeps a connection in whatever serves it (a
// coroutine, or the handler of a plain readiness wait for an idle HTTP keep-alive client).
class Connection {
 public:
  using Closer = std::function<void(CloseReason)>;
  // What StopAccepting() and CloseAll() do to this connection; always run on the executor the
  // connection was placed on, which is also where this must be called (Serve runs there). Set it
  // again whenever the connection's objects change.
  void OnClose(Closer closer);
  // The client's address, as accept4 gave it (no getpeername per connection).
  const boost::asio::ip::tcp::endpoint& peer() const;

  struct Entry;  // the listener's record of it

 private:
  friend class TcpListener;
  explicit Connection(std::shared_ptr<Entry> entry) : entry_(std::move(entry)) {}
  std::shared_ptr<Entry> entry_;
};

struct ListenerOptions {
  std::string name;     // in log lines: "registry http", "gateway zone"
  std::string address;  // "ip:port" (IPv4 or [IPv6]); port 0: any free port
  std::size_t max_connections = 4096;
  // Written to a client over max_connections before it is closed (empty: closed at once).
  std::string refusal;
  int backlog = boost::asio::socket_base::max_listen_connections;
  // SetKeepAlive's options (TCP_NODELAY and keepalive probes) on every accepted connection, set
  // once on the listening socket: Linux copies them to each socket it accepts.
  bool keep_alive = false;
  // Each accepted socket registered with its reactor for the peer's end too (net::Adopt's
  // Registration), for a server that has net::WatchPeerEnd() watch its connections: then that
  // costs no system call. WatchPeerEnd() says where it may be called: with the workers' form of
  // Start, on the worker; with the shared form, from a strand the Place gave the connection.
  bool watch_peer_end = false;
};

class TcpListener {
 public:
  // The executor a new connection is served on; called on the accept strand.
  using Place = std::function<boost::asio::any_io_executor()>;
  // Serves one connection, run on the executor Place returned (where its socket lives): starts
  // what the connection needs and returns.
  using Serve = std::function<void(boost::asio::ip::tcp::socket, Connection)>;
  // A connection served by one coroutine.
  using Coroutine =
      std::function<boost::asio::awaitable<void>(boost::asio::ip::tcp::socket, Connection)>;
  // A Serve that spawns `coroutine` for each connection on its socket's executor.
  static Serve Spawn(Coroutine coroutine);

  // Binds options.address and starts accepting on a strand of `accept_on`, which the owner runs
  // (before or after Start) and stops; each connection is served where `place` says.
  static Result<std::unique_ptr<TcpListener>> Start(boost::asio::io_context& accept_on,
                                                    ListenerOptions options, Place place,
                                                    Serve serve);
  // Binds options.address once per context of `workers` (each run by exactly one thread, by the
  // owner, before or after Start) and accepts on each; a connection is served on the context
  // that accepted it, or the least loaded one (see above).
  static Result<std::unique_ptr<TcpListener>> Start(
      const std::vector<boost::asio::io_context*>& workers, ListenerOptions options, Serve serve);
  ~TcpListener();  // StopAccepting()
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  std::uint16_t port() const;
  const ConnectionCounters& counters() const;
  // Closes the listening socket, then runs every open connection's closer with kDraining.
  // Idempotent.
  void StopAccepting();
  // Runs every open connection's closer with kCloseNow; returns without waiting for them.
  void CloseAll();

  struct State;

 private:
  struct Gate;
  TcpListener(std::shared_ptr<State> state, std::vector<std::shared_ptr<Gate>> gates)
      : state_(std::move(state)), gates_(std::move(gates)) {}
  // Both Starts: one listening socket per context (SO_REUSEPORT when there are several).
  static Result<std::unique_ptr<TcpListener>> Open(std::vector<boost::asio::io_context*> contexts,
                                                   ListenerOptions options, Place place,
                                                   Serve serve);
  std::shared_ptr<State> state_;
  // The listening sockets, one per accepting context: released with the listener (their accept
  // loops hold them until they end), never by a connection.
  std::vector<std::shared_ptr<Gate>> gates_;
};

namespace internal {

// Whether a worker holding `mine` connections hands a new one to the worker holding the fewest,
// `fewest`: when it holds more than an eighth more, and more than the kernel's hash spreads two
// workers' n = mine + fewest connections by chance (twice sqrt(n), its spread, plus 2). Short
// connections even out by themselves, and each hand-over costs a registration and a post across
// threads (at 64 concurrent short sessions a rule of an eighth alone handed over 29% of them).
bool HandOver(std::size_t mine, std::size_t fewest);

}  // namespace internal

}  // namespace drover::net
