#include "net/tcp_listener.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cmath>
#include <future>
#include <mutex>
#include <optional>
#include <vector>

#include "drover/mutex.h"
#include "net/sockets.h"

namespace drover::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {
// After a failed accept (out of descriptors or memory): retrying at once would spin.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
// Connections taken per readiness event before the accept loop waits again (and lets the
// context's other work run). Each wait re-arms the listening socket (an EPOLL_CTL_MOD), and a
// batch that empties the backlog ends with an accept4 that finds nothing, so taking a few per
// event costs fewer system calls per connection; few enough that a burst does not queue long
// ahead of the established connections (64 in a row put a 20 ms tail on p99 when the loop ran on
// one strand for every worker). Under a new connection per request (1-thread gateway, wrk with 64
// connections; means of alternating 5 s runs): 4 against 1, 18.0k against 17.6k and 19.0k against
// 18.0k requests/s; 16 against 4, 19.3k against 18.5k, p99 5.6 against 6.1 ms.
constexpr int kAcceptBatch = 16;
// A refused client that does not read its refusal gets a closed socket after this long.
constexpr auto kRefusalLimit = std::chrono::seconds(1);
}  // namespace

// A connection is open for as long as its Entry lives: the Connection handed to Serve holds the
// only owning reference, and its last copy going (the coroutine ended, or whatever the owner moved
// it into was destroyed, also with its io_context) unregisters it. No frame of the listener's
// stays with a connection.
struct Connection::Entry : std::enable_shared_from_this<Connection::Entry> {
  Entry(std::shared_ptr<TcpListener::State> s, std::size_t d, asio::any_io_executor e,
        const tcp::endpoint& p)
      : state(std::move(s)), door(d), executor(std::move(e)), peer(p) {}
  ~Entry();
  const std::shared_ptr<TcpListener::State> state;  // outlives every connection it accepted
  const std::size_t door;                           // whose context serves it
  const asio::any_io_executor executor;
  const tcp::endpoint peer;
  // On its door's list of open connections (guarded by the door's mutex): a place in the list
  // costs no allocation.
  Entry* prev = nullptr;
  Entry* next = nullptr;
  // Set and run on `executor` only (OnClose's contract; Notify posts there): no lock.
  Closer closer;
};

void Connection::OnClose(Closer closer) { entry_->closer = std::move(closer); }

const tcp::endpoint& Connection::peer() const { return entry_->peer; }

// One listening socket and the executor its accept loop runs on: a strand of the context when
// that may be run by several threads (the single-context form), the context's own executor when
// it is run by one (the workers' form: a strand there put a lock and a queue, and with Asio's
// type-erased executors an allocation, on every step of the loop). Shared by the listener and
// that loop (and a refusal under way) -- never by the connections, whose last reference may go
// while the contexts are destroyed: a gate goes with its listener, or at the latest with its
// context.
struct TcpListener::Gate {
  using Strand = asio::strand<asio::io_context::executor_type>;
  Gate(asio::io_context& c, bool one_thread)
      : context(c),
        executor(one_thread ? asio::any_io_executor(c.get_executor())
                            : asio::any_io_executor(asio::make_strand(c))),
        acceptor(executor) {}
  // True on a thread running the loop's executor (then nothing else can be running it).
  bool RunningHere() const {
    if (const Strand* strand = executor.target<Strand>()) return strand->running_in_this_thread();
    return context.get_executor().running_in_this_thread();
  }
  asio::io_context& context;
  const asio::any_io_executor executor;
  tcp::acceptor acceptor;  // used on `executor` only, once accepting started
};

// The connections served on one gate's context, for Balance and Notify (a lock per door: the
// threads of two doors never wait for each other to open or close a connection).
struct Door {
  explicit Door(asio::io_context& context) : io(context) {}
  asio::io_context& io;
  std::atomic<std::size_t> active{0};
  Mutex mu;
  Connection::Entry* open DROVER_GUARDED_BY(mu) = nullptr;  // the list's head (Entry::next)
};

struct TcpListener::State : std::enable_shared_from_this<State> {
  State(ListenerOptions o, Place p, Serve s)
      : options(std::move(o)), place(std::move(p)), serve(std::move(s)) {}

  asio::awaitable<void> Accept(std::shared_ptr<TcpListener::Gate> gate, std::size_t door);
  asio::awaitable<void> Refuse(std::shared_ptr<TcpListener::Gate> gate, tcp::socket socket);
  // Where a connection accepted by `door` is served (several doors): that door's context, or
  // the least loaded one's when it holds more than its share.
  std::size_t Balance(std::size_t door) const;
  // Registers a connection from `peer` served on `executor` (door `door`'s context).
  std::shared_ptr<Connection::Entry> Open(std::size_t door, const asio::any_io_executor& executor,
                                          const tcp::endpoint& peer);
  // Runs every open connection's closer with `reason`, each on its executor.
  void Notify(CloseReason reason);

  std::vector<std::unique_ptr<Door>> doors;
  const ListenerOptions options;
  const Place place;  // empty with several doors
  const Serve serve;
  std::uint16_t port = 0;
  ConnectionCounters counters;
  std::once_flag stop_once;
};

std::size_t TcpListener::State::Balance(std::size_t door) const {
  const std::size_t mine = doors[door]->active.load(std::memory_order_relaxed);
  std::size_t least = door;
  std::size_t fewest = mine;
  for (std::size_t d = 0; d < doors.size(); ++d) {
    const std::size_t n = doors[d]->active.load(std::memory_order_relaxed);
    if (n < fewest) {
      least = d;
      fewest = n;
    }
  }
  return internal::HandOver(mine, fewest) ? least : door;
}

bool internal::HandOver(std::size_t mine, std::size_t fewest) {
  if (mine <= fewest) return false;
  const std::size_t excess = mine - fewest;
  const double chance = 2.0 * std::sqrt(static_cast<double>(mine + fewest)) + 2.0;
  return static_cast<double>(excess) > chance && excess > fewest / 8;
}

asio::awaitable<void> TcpListener::State::Accept(std::shared_ptr<TcpListener::Gate> gate,
                                                 std::size_t door) {
  auto self = shared_from_this();
  tcp::acceptor& acceptor = gate->acceptor;
  const tcp protocol = acceptor.local_endpoint().protocol();
  while (true) {
    // Readiness, then up to kAcceptBatch connections with accept4, then wait again. Each wait
    // re-arms the descriptor (Asio's EPOLL_CTL_MOD on the edge-triggered reactor), which raises
    // an event at once when more connections are waiting, and the context's other work runs
    // between two waits; a batch cut short by an empty backlog ends with an accept4 that finds
    // nothing. Each descriptor goes straight into a socket of the worker that will serve it: it
    // is registered with that worker's reactor once, and no context's pending operations ever
    // hold another context's socket.
    error_code ec;
    co_await acceptor.async_wait(tcp::acceptor::wait_read,
                                 asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    for (int taken = 0; !ec && taken < kAcceptBatch;) {
      tcp::endpoint peer;
      auto peer_size = static_cast<socklen_t>(peer.capacity());
      const int fd = ::accept4(acceptor.native_handle(), peer.data(), &peer_size,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK) break;
        if (err == EINTR || err == ECONNABORTED) continue;  // that one is gone; the next may not
        ec.assign(err, boost::system::system_category());
        break;
      }
      ++taken;
      counters.accepted.fetch_add(1, std::memory_order_relaxed);
      // A socket for the descriptor on `on`'s context; nullopt (the descriptor closed) if the
      // reactor will not take it.
      const auto adopt = [this, &protocol, fd](const auto& on) -> std::optional<tcp::socket> {
        tcp::socket socket(on);
        if (Adopt(socket, protocol, fd, {.peer_end = options.watch_peer_end})) return std::nullopt;
        return socket;
      };
      if (counters.active.load(std::memory_order_relaxed) >= options.max_connections) {
        // The client learns at once and may try another server; the ones already here keep
        // their share of the process.
        counters.refused.fetch_add(1, std::memory_order_relaxed);
        if (auto refused = adopt(gate->executor)) {
          asio::co_spawn(gate->executor, Refuse(gate, std::move(*refused)), asio::detached);
        }
        continue;
      }
      const std::size_t serving = place ? door : Balance(door);
      const asio::any_io_executor executor =
          place ? place() : asio::any_io_executor(doors[serving]->io.get_executor());
      if (auto socket = adopt(executor)) {
        peer.resize(peer_size);
        // At once on this thread when the executor runs here (and is no other strand), else
        // posted to it.
        asio::dispatch(executor,
                       [self, socket = std::move(*socket),
                        connection = Connection(Open(serving, executor, peer))]() mutable {
                         self->serve(std::move(socket), std::move(connection));
                       });
      }
    }
    if (ec) {  // out of descriptors or memory: give the process a moment
      if (!acceptor.is_open()) co_return;
      spdlog::warn("{}: accept failed ({}); retrying in {} ms", options.name, ec.message(),
                   kAcceptPause.count());
      asio::steady_timer pause(gate->executor, kAcceptPause);
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
  }
}

asio::awaitable<void> TcpListener::State::Refuse(std::shared_ptr<TcpListener::Gate> gate,
                                                 tcp::socket socket) {
  error_code ec;
  if (!options.refusal.empty()) {
    // Best effort and bounded: a client that never reads gets a closed socket.
    asio::steady_timer limit(gate->executor, kRefusalLimit);
    limit.async_wait([&socket](error_code timer_ec) {
      if (!timer_ec) socket.close(timer_ec);
    });
    co_await asio::async_write(socket, asio::buffer(options.refusal),
                               asio::redirect_error(asio::use_awaitable, ec));
    limit.cancel();
    socket.shutdown(tcp::socket::shutdown_send, ec);
  }
  socket.close(ec);
}

std::shared_ptr<Connection::Entry> TcpListener::State::Open(std::size_t door,
                                                            const asio::any_io_executor& executor,
                                                            const tcp::endpoint& peer) {
  counters.active.fetch_add(1, std::memory_order_relaxed);
  Door& d = *doors[door];
  d.active.fetch_add(1, std::memory_order_relaxed);
  auto entry = std::make_shared<Connection::Entry>(shared_from_this(), door, executor, peer);
  MutexLock lock(d.mu);
  entry->next = d.open;
  if (d.open) d.open->prev = entry.get();
  d.open = entry.get();
  return entry;
}

Connection::Entry::~Entry() {
  Door& d = *state->doors[door];
  {
    MutexLock lock(d.mu);
    (prev ? prev->next : d.open) = next;
    if (next) next->prev = prev;
  }
  d.active.fetch_sub(1, std::memory_order_relaxed);
  state->counters.active.fetch_sub(1, std::memory_order_relaxed);
}

void TcpListener::State::Notify(CloseReason reason) {
  std::vector<std::shared_ptr<Connection::Entry>> entries;
  for (const auto& door : doors) {
    MutexLock lock(door->mu);
    // (An entry being destroyed is still listed until its destructor takes this lock: it gives
    // no reference any more.)
    for (Connection::Entry* e = door->open; e != nullptr; e = e->next) {
      if (auto entry = e->weak_from_this().lock()) entries.push_back(std::move(entry));
    }
  }
  for (const auto& entry : entries) {
    asio::post(entry->executor, [entry, reason] {
      // A copy: the closer may set another one.
      if (const Connection::Closer closer = entry->closer) closer(reason);
    });
  }
}

namespace {

Status CannotListen(const ListenerOptions& o, const error_code& ec) {
  return UnavailableError(o.name + ": cannot listen on " + o.address + ": " + ec.message());
}

}  // namespace

Result<std::unique_ptr<TcpListener>> TcpListener::Open(std::vector<asio::io_context*> contexts,
                                                       ListenerOptions options, Place place,
                                                       Serve serve) {
  DROVER_ASSIGN_OR_RETURN(tcp::endpoint endpoint,
                          ParseEndpoint(options.address, options.name + " address", true));
  if (contexts.empty()) {
    return InvalidArgumentError(options.name + ": no io_context to accept on");
  }
  auto state = std::make_shared<State>(std::move(options), std::move(place), std::move(serve));
  const ListenerOptions& o = state->options;
  const bool shared = contexts.size() > 1;
  const bool one_thread = !state->place;  // the workers' form: each context run by one thread
  if (shared) {
    // Bound once alone first: that fails while another process listens on the address (with
    // SO_REUSEPORT or not), which the shared sockets alone would join instead. It also turns
    // port 0 into the port they all take.
    tcp::acceptor probe(*contexts[0]);
    if (const error_code ec = Listen(probe, endpoint, 1)) return CannotListen(o, ec);
    endpoint.port(probe.local_endpoint().port());
  }
  std::vector<std::shared_ptr<TcpListener::Gate>> gates;
  for (asio::io_context* context : contexts) {
    state->doors.push_back(std::make_unique<Door>(*context));
    const auto& gate =
        gates.emplace_back(std::make_shared<TcpListener::Gate>(*context, one_thread));
    if (const error_code ec = Listen(gate->acceptor, endpoint, o.backlog, shared)) {
      return CannotListen(o, ec);
    }
    error_code ec;
    gate->acceptor.non_blocking(true, ec);  // accept4 in Accept() must never block
    if (ec) return CannotListen(o, ec);
    // Accepted sockets inherit these from the listening one: set once here, not per connection.
    if (o.keep_alive) SetKeepAlive(gate->acceptor.native_handle());
  }
  state->port = gates[0]->acceptor.local_endpoint().port();
  for (std::size_t d = 0; d < gates.size(); ++d) {
    asio::co_spawn(gates[d]->executor, state->Accept(gates[d], d), asio::detached);
  }
  return std::unique_ptr<TcpListener>(new TcpListener(std::move(state), std::move(gates)));
}

Result<std::unique_ptr<TcpListener>> TcpListener::Start(asio::io_context& accept_on,
                                                        ListenerOptions options, Place place,
                                                        Serve serve) {
  return Open({&accept_on}, std::move(options), std::move(place), std::move(serve));
}

Result<std::unique_ptr<TcpListener>> TcpListener::Start(
    const std::vector<asio::io_context*>& workers, ListenerOptions options, Serve serve) {
  return Open(workers, std::move(options), nullptr, std::move(serve));
}

TcpListener::Serve TcpListener::Spawn(Coroutine coroutine) {
  return [coroutine = std::move(coroutine)](tcp::socket socket, Connection connection) {
    const asio::any_io_executor executor = socket.get_executor();
    asio::co_spawn(executor, coroutine(std::move(socket), std::move(connection)), asio::detached);
  };
}

TcpListener::~TcpListener() { StopAccepting(); }

std::uint16_t TcpListener::port() const { return state_->port; }

const ConnectionCounters& TcpListener::counters() const { return state_->counters; }

void TcpListener::StopAccepting() {
  std::call_once(state_->stop_once, [this] {
    State& s = *state_;
    std::vector<std::future<void>> closing;
    for (const std::shared_ptr<Gate>& g : gates_) {
      Gate& gate = *g;
      if (gate.context.stopped() || gate.RunningHere()) {
        // No io thread can touch the acceptor any more (or this is the one that would).
        error_code ec;
        gate.acceptor.close(ec);
        continue;
      }
      auto closed = std::make_shared<std::promise<void>>();
      closing.push_back(closed->get_future());
      asio::post(gate.executor, [&gate, closed] {
        error_code ec;
        gate.acceptor.close(ec);
        closed->set_value();
      });
    }
    for (auto& c : closing) c.wait();
    s.Notify(CloseReason::kDraining);
  });
}

void TcpListener::CloseAll() { state_->Notify(CloseReason::kCloseNow); }

}  // namespace drover::net
