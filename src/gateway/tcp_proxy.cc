#include "gateway/tcp_proxy.h"

// clang-format off
#include "net/sockets.h"  // first: it includes <utility> before Asio
// clang-format on

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <cerrno>
#include <cstring>
#include <optional>
#include <span>

#include "drover/router.h"
#include "gateway/key_line.h"
#include "gateway/relay_chunk.h"
#include "gateway/retry_budget.h"
#include "gateway/thread_random.h"
#include "gateway/upstream.h"
#include "net/tcp_listener.h"
#include "net/turn_sends.h"

namespace drover::gateway {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// One proxied connection; every member is touched only on its worker's thread. Once both
// sides are connected no coroutine holds it: its two pumps and its watchdog are plain handlers
// of pending waits, each owning a reference, so an idle session costs its sockets, this object
// and three pending operations.
struct Conn {
  Conn(tcp::socket c, std::shared_ptr<TcpProxy::State> s, net::Connection n)
      : client(std::move(c)),
        upstream(client.get_executor()),
        timer(client.get_executor()),
        state(std::move(s)),
        connection(std::move(n)) {}
  ~Conn() {
    if (counters) counters->active.fetch_sub(1, std::memory_order_relaxed);
  }
  void CloseBoth() {
    error_code ec;
    client.close(ec);
    upstream.close(ec);
  }

  tcp::socket client;
  tcp::socket upstream;
  asio::steady_timer timer;       // key timeout, then the idle watchdog
  std::uint64_t timer_epoch = 0;  // a timer callback from an older phase must not act
  MonoClock::time_point last_activity{};
  // The client sent data the upstream has not answered since (response_timeout).
  bool awaiting_upstream = false;
  MonoClock::time_point awaiting_since{};
  int pumps_done = 0;
  // When the upstream socket gets its keepalive probe timing, until it has it.
  std::optional<MonoClock::time_point> tune_probes_at;
  bool cut = false;                            // by the watchdog
  std::shared_ptr<InstanceCounters> counters;  // the instance this connection counts against
  const std::shared_ptr<TcpProxy::State> state;
  net::Connection connection;  // open (for the listener) while this lives
  // A pump's write waiting for the end of the loop's turn (net::TurnSends), one per direction;
  // holds the connection meanwhile.
  struct TurnWrite final : net::TurnSends::Waiter {
    std::shared_ptr<Conn> hold;
    bool from_client = false;
    void Sent(long result, std::span<const char> bytes) override;
    void Dropped() override { hold.reset(); }
  };
  std::array<TurnWrite, 2> turn_writes;  // [from_client]
};

// A session this old gets the upstream's keepalive probe timing (net::TuneKeepAliveProbes): most
// sessions are shorter, and skip its 3 setsockopt; the ones that last learn of a vanished
// upstream host within about a minute of silence, as the client side does.
constexpr auto kTuneProbesAfter = std::chrono::seconds(10);

// A session's connect phase, owned by the pending connect's handler. Holds its place in the
// listener's retry budget: as a dial in flight (the budget's "requests") for as long as it lives,
// and as a retry while a further attempt connects.
struct Dialing {
  Dialing(std::shared_ptr<Conn> conn, RetryBudget& budget)
      : c(std::move(conn)), request(budget), retry(budget) {}

  // First, so it goes last: the connection keeps the listener's state, and with it the budget,
  // alive while the two below give back what they hold.
  std::shared_ptr<Conn> c;
  RetryBudget::Request request;
  RetryBudget::Retry retry;                          // held while a further attempt connects
  std::shared_ptr<const UpstreamSnapshot> snapshot;  // loaded once for the session
  std::uint64_t key_hash = 0;
  std::string rest;  // bytes the client sent after its key line
  std::vector<std::size_t> tried;
  std::vector<std::size_t> passed;  // a hot key's owners before the rank drawn for this session
  std::string last_error;
  std::size_t pick = 0;  // the instance being connected
};

struct TcpProxy::State : std::enable_shared_from_this<State> {
  State(const Workers& w, const ListenerConfig& c, Upstream& u, Clock& k)
      : workers(w), config(c), upstream(u), clock(k) {}

  // A new client (net::TcpListener::Serve): connects upstream at once, or (policy hash) reads
  // the key line first.
  void Serve(tcp::socket client, net::Connection connection);
  asio::awaitable<void> ReadKeyThenDial(std::shared_ptr<Conn> c);
  asio::awaitable<std::optional<std::string>> ReadKeyLine(std::shared_ptr<Conn> c,
                                                          std::string& rest);
  // A session's dial, on the upstream snapshot of the moment.
  // `keyed`: a key line gave the hash (a hot key's session may pass over its first owners).
  void StartDial(std::shared_ptr<Conn> c, std::uint64_t key_hash, std::string rest,
                 bool keyed = false);
  // Picks an instance and connects to it, trying others after a failed connect (up to
  // connect_attempts); the session starts (Started) on the first that answers, or ends when none
  // could be reached.
  void Dial(std::unique_ptr<Dialing> d);
  void Dialed(std::unique_ptr<Dialing> d, bool ok);
  void GiveUp(Dialing& d);  // no instance answered: the client is closed
  // Connected: the key line's leftover bytes go first, then the pumps and the watchdog start.
  void Started(std::shared_ptr<Conn> c, std::string rest);
  // Moves what `from` has to the other side, then waits for more (or for the other side to take
  // the rest); returns at once, and goes on in handlers until that direction ends.
  void Pump(std::shared_ptr<Conn> c, bool from_client);
  // Pump()'s wait for `from_client`'s side to have bytes (or its end).
  void Wait(std::shared_ptr<Conn> c, bool from_client);
  // A pump's write made at the turn's end (TurnWrite): what the other side did not take waits for
  // it, as in Pump().
  void Sent(std::shared_ptr<Conn> c, bool from_client, long result, std::span<const char> bytes);
  // The bytes [from, to) of `chunk` the other side did not take yet, written when it takes them
  // (backpressure: nothing more is read this way meanwhile); then the pump goes on.
  void WriteRest(std::shared_ptr<Conn> c, bool from_client, RelayChunk chunk, std::size_t from,
                 std::size_t to);
  // One way has ended: its end passed on to `to`.
  void InputEnded(Conn& c, tcp::socket& to);
  void PumpEnded(Conn& c);
  // Cuts the connection after idle_timeout without a byte, or response_timeout without an
  // answer; re-armed by its own handler until both pumps ended.
  void Watchdog(std::shared_ptr<Conn> c);

  const Workers workers;
  const ListenerConfig config;
  Upstream& upstream;
  Clock& clock;
  ListenerCounters counters;
  // Connects to a further instance share it (as HTTP retries do): when an upstream fails
  // wholesale, retries add at most retry_budget_percent more connects.
  RetryBudget budget{config.retry_budget_percent, config.retry_budget_min};
};

asio::awaitable<std::optional<std::string>> TcpProxy::State::ReadKeyLine(std::shared_ptr<Conn> c,
                                                                         std::string& rest) {
  const std::uint64_t epoch = ++c->timer_epoch;
  c->timer.expires_after(config.key_timeout);
  c->timer.async_wait([c, epoch](error_code ec) {
    if (!ec && c->timer_epoch == epoch) c->CloseBoth();
  });
  std::string line;
  std::array<char, 256> buf;
  while (true) {
    error_code ec;
    const std::size_t n = co_await c->client.async_read_some(
        asio::buffer(buf), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return std::nullopt;
    line.append(buf.data(), n);
    const std::size_t nl = line.find('\n');
    if (nl != std::string::npos) {
      rest = line.substr(nl + 1);
      line.resize(nl);
      break;
    }
    if (line.size() > kMaxKeyLine) co_return std::nullopt;
  }
  ++c->timer_epoch;
  c->timer.cancel();
  co_return ParseKeyLine(line);
}

void TcpProxy::State::Pump(std::shared_ptr<Conn> c, bool from_client) {
  tcp::socket& from = from_client ? c->client : c->upstream;
  tcp::socket& to = from_client ? c->upstream : c->client;
  // Move what is there, with a buffer borrowed for as long as there is something to move. Reads
  // and writes are tried at once, non-blocking by flag (MSG_DONTWAIT: no ioctl per socket), and
  // most messages never go through the reactor. A read shorter than the buffer took all there
  // was, and tells the reactor so (net::ReadSome): the wait after it costs no system call, and
  // an edge raised by bytes that came since completes it.
  {
    RelayChunk chunk;
    while (true) {
      error_code read_ec;
      bool end_follows = false;  // these bytes are the last this way (net::WatchPeerEnd)
      const std::size_t size =
          net::ReadSome(from, asio::buffer(chunk.data(), chunk.size()), read_ec, &end_follows);
      if (read_ec == asio::error::would_block) break;
      if (read_ec == asio::error::eof) return InputEnded(*c, to);
      if (read_ec) {
        c->CloseBoth();
        return PumpEnded(*c);
      }
      c->last_activity = MonoClock::now();
      if (!from_client) {
        c->awaiting_upstream = false;
      } else if (!c->awaiting_upstream && config.response_timeout > Duration::zero()) {
        c->awaiting_upstream = true;
        c->awaiting_since = c->last_activity;
        c->timer.cancel();  // the watchdog recomputes its deadline
      }
      // A small message goes with the turn's other writes, in one system call, where the thread
      // gathers them (ARCHITECTURE, gateway speed, sixteenth pass); the chunk goes back at once
      // (its bytes were copied). Then this way waits: a read shorter than the chunk took all
      // there was.
      net::TurnSends* const turn = end_follows ? nullptr : net::TurnSends::ForThisThread();
      if (turn != nullptr && size <= net::kCoalescedWrite) {
        Conn::TurnWrite& w = c->turn_writes[from_client ? 1 : 0];
        w.from_client = from_client;
        turn->Send(to, {chunk.data(), size}, w);
        w.hold = std::move(c);
        return;
      }
      // The last bytes wait in the kernel for the FIN that follows them (MSG_MORE; the
      // shutdown or close sends both in one segment).
      const int more = end_follows ? MSG_MORE : 0;
      std::size_t sent = 0;
      error_code send_ec;
      while (sent < size && !send_ec) {
        const asio::const_buffer piece(chunk.data() + sent, size - sent);
        sent += net::WriteSome(to, {&piece, 1}, send_ec, more);
      }
      if (send_ec == asio::error::would_block) {
        // (The end, if it follows, is then read as usual.)
        return WriteRest(std::move(c), from_client, std::move(chunk), sent, size);
      }
      if (send_ec) {
        c->CloseBoth();
        return PumpEnded(*c);
      }
      if (end_follows) return InputEnded(*c, to);
      if (size < chunk.size()) break;  // all there was
    }
  }
  Wait(std::move(c), from_client);
}

void Conn::TurnWrite::Sent(long result, std::span<const char> bytes) {
  std::shared_ptr<Conn> c = std::move(hold);
  c->state->Sent(std::move(c), from_client, result, bytes);
}

void TcpProxy::State::Sent(std::shared_ptr<Conn> c, bool from_client, long result,
                           std::span<const char> bytes) {
  if (result == static_cast<long>(bytes.size())) return Wait(std::move(c), from_client);
  if (result != -EAGAIN && (result < 0 || result == net::TurnSends::kNotSent)) {
    c->CloseBoth();  // (kNotSent: closed meanwhile)
    return PumpEnded(*c);
  }
  const std::size_t sent = result > 0 ? static_cast<std::size_t>(result) : 0;
  RelayChunk chunk;
  std::memcpy(chunk.data(), bytes.data() + sent, bytes.size() - sent);
  WriteRest(std::move(c), from_client, std::move(chunk), 0, bytes.size() - sent);
}

void TcpProxy::State::WriteRest(std::shared_ptr<Conn> c, bool from_client, RelayChunk chunk,
                                std::size_t from, std::size_t to) {
  tcp::socket& out = from_client ? c->upstream : c->client;
  const asio::const_buffer rest(chunk.data() + from, to - from);
  asio::async_write(out, rest,
                    [c = std::move(c), from_client, chunk = std::move(chunk)](error_code write_ec,
                                                                              std::size_t) mutable {
                      if (write_ec) {
                        c->CloseBoth();
                        return c->state->PumpEnded(*c);
                      }
                      c->state->Pump(std::move(c), from_client);
                    });
}

void TcpProxy::State::Wait(std::shared_ptr<Conn> c, bool from_client) {
  // Nothing to move: wait without a buffer (an idle session holds none).
  tcp::socket& from = from_client ? c->client : c->upstream;
  net::WaitReadable(from, [c = std::move(c), from_client](error_code ec) mutable {
    if (ec) {
      c->CloseBoth();
      return c->state->PumpEnded(*c);
    }
    c->state->Pump(std::move(c), from_client);
  });
}

void TcpProxy::State::InputEnded(Conn& c, tcp::socket& to) {
  // Half-close: pass the FIN on. When the other way has ended already, the close that follows
  // sends it (both sides were read to their end, so nothing unread turns it into a reset).
  if (c.pumps_done == 0) {
    error_code ignored;
    to.shutdown(tcp::socket::shutdown_send, ignored);
  }
  PumpEnded(c);
}

void TcpProxy::State::PumpEnded(Conn& c) {
  if (++c.pumps_done == 2) {
    c.CloseBoth();
    c.timer.cancel();  // wakes the watchdog, which lets go
  }
}

void TcpProxy::State::Watchdog(std::shared_ptr<Conn> c) {
  if (c->pumps_done == 2) return;
  const auto now = MonoClock::now();
  auto deadline = c->last_activity + config.idle_timeout;
  bool response_due = false;
  if (c->awaiting_upstream && c->awaiting_since + config.response_timeout < deadline) {
    deadline = c->awaiting_since + config.response_timeout;
    response_due = true;
  }
  if (!c->cut && now >= deadline) {
    // Nothing either way for idle_timeout, or an upstream that stopped answering (a frozen
    // process keeps its sockets open and its kernel keeps acknowledging). The pumps end; the
    // last one cancels the timer, and this handler lets go.
    (response_due ? counters.response_timeouts : counters.idle_timeouts)
        .fetch_add(1, std::memory_order_relaxed);
    c->CloseBoth();
    c->cut = true;
  }
  if (c->cut) deadline = now + std::chrono::hours(1);
  if (c->tune_probes_at && !c->cut) {
    if (now >= *c->tune_probes_at) {
      net::TuneKeepAliveProbes(c->upstream.native_handle());
      c->tune_probes_at.reset();
    } else {
      deadline = std::min(deadline, *c->tune_probes_at);
    }
  }
  c->timer.expires_at(deadline);
  c->timer.async_wait([c = std::move(c)](error_code) mutable { c->state->Watchdog(std::move(c)); });
}

void TcpProxy::State::Dial(std::unique_ptr<Dialing> d) {
  Conn& c = *d->c;
  while (static_cast<int>(d->tried.size()) < config.connect_attempts) {
    thread_local std::vector<std::size_t> scratch;
    const Result<std::size_t> pick = upstream.PickPassing(
        *d->snapshot, d->key_hash, d->passed, d->tried, clock.Now(), ThreadRandom(), scratch);
    if (!pick.ok()) {
      d->last_error = pick.status().message();
      break;
    }
    if (!d->tried.empty()) {  // a further instance: a retry
      if (!d->retry.Take()) {
        counters.budget_exhausted.fetch_add(1, std::memory_order_relaxed);
        d->last_error += "; no retry: the retry budget is spent";
        break;
      }
      counters.retries.fetch_add(1, std::memory_order_relaxed);
    }
    const router::Endpoint& e = d->snapshot->router->table->at(*pick);
    d->tried.push_back(*pick);
    d->pick = *pick;
    const auto to = net::ParseEndpoint(e.address, "instance address");
    if (!to.ok()) {
      Dialed(std::move(d), false);
      return;
    }
    // (CloseBoth() from the listener's closer ends a pending connect too.)
    c.upstream = tcp::socket(c.client.get_executor());
    net::StartConnect(c.upstream, *to, config.connect_timeout,
                      [this, d = std::move(d)](error_code ec) mutable {
                        const bool ok = !ec && d->c->upstream.is_open();
                        Dialed(std::move(d), ok);
                      });
    return;
  }
  GiveUp(*d);
}

void TcpProxy::State::GiveUp(Dialing& d) {
  counters.no_upstream.fetch_add(1, std::memory_order_relaxed);
  spdlog::debug("gateway {}: closing a client: {}", config.name, d.last_error);
  d.c->CloseBoth();
}

void TcpProxy::State::Dialed(std::unique_ptr<Dialing> d, bool ok) {
  d->retry.Release();  // this attempt's connect is over
  const std::size_t pick = d->pick;
  upstream.ReportConnect(*d->snapshot, pick, ok, clock.Now());
  const std::shared_ptr<InstanceCounters>& counters_of = d->snapshot->counters[pick];
  if (ok) {
    d->c->counters = counters_of;
    counters_of->active.fetch_add(1, std::memory_order_relaxed);
    counters_of->connections.fetch_add(1, std::memory_order_relaxed);
    Started(std::move(d->c), std::move(d->rest));
    return;
  }
  counters_of->connect_failures.fetch_add(1, std::memory_order_relaxed);
  const router::Endpoint& e = d->snapshot->router->table->at(pick);
  d->last_error = "connect to " + e.id + " at " + e.address + " failed";
  if (!d->c->client.is_open()) return GiveUp(*d);  // cut meanwhile (shutdown)
  Dial(std::move(d));
}

void TcpProxy::State::Started(std::shared_ptr<Conn> c, std::string rest) {
  if (!rest.empty()) {
    auto owned = std::make_unique<std::string>(std::move(rest));
    const asio::const_buffer bytes = asio::buffer(*owned);
    asio::async_write(c->upstream, bytes,
                      [c, owned = std::move(owned)](error_code ec, std::size_t) mutable {
                        if (ec) return c->CloseBoth();
                        c->state->Started(std::move(c), {});
                      });
    return;
  }
  // The probe timing comes from the watchdog once the session has lasted kTuneProbesAfter.
  net::EnableKeepAlive(c->upstream.native_handle());
  // Each side's last bytes go on with their FIN (net::WatchPeerEnd).
  net::WatchPeerEnd(c->client);
  net::WatchPeerEnd(c->upstream);
  c->last_activity = MonoClock::now();
  c->tune_probes_at = c->last_activity + kTuneProbesAfter;
  ++c->timer_epoch;  // a timer callback of the key phase must not act
  // The client's first bytes usually came with its connection: read them. A just-connected
  // upstream has rarely sent anything yet: wait for it rather than spend a read learning so (a
  // greeting already there raised its event when the connect completed, or raises it as it
  // comes; net::Connect left the reactor knowing the socket for drained until then).
  Pump(c, true);
  Wait(c, false);
  Watchdog(std::move(c));
}

void TcpProxy::State::Serve(tcp::socket client, net::Connection connection) {
  auto c = std::make_shared<Conn>(std::move(client), shared_from_this(), std::move(connection));
  c->connection.OnClose([weak = std::weak_ptr<Conn>(c)](net::CloseReason reason) {
    if (reason != net::CloseReason::kCloseNow) return;
    if (const std::shared_ptr<Conn> live = weak.lock()) live->CloseBoth();
  });
  if (config.policy == Policy::kHash) {
    const asio::any_io_executor executor = c->client.get_executor();
    asio::co_spawn(executor, ReadKeyThenDial(std::move(c)), asio::detached);
    return;
  }
  // Nothing to wait for: the connect starts in the turn of the loop that accepted the client.
  StartDial(std::move(c), 0, {});
}

asio::awaitable<void> TcpProxy::State::ReadKeyThenDial(std::shared_ptr<Conn> c) {
  std::string rest;
  const std::optional<std::string> key = co_await ReadKeyLine(c, rest);
  if (!key) {
    counters.bad_key.fetch_add(1, std::memory_order_relaxed);
    c->CloseBoth();
    co_return;
  }
  upstream.RecordKey(*key);
  StartDial(std::move(c), router::HashKey(*key), std::move(rest), true);
}

void TcpProxy::State::StartDial(std::shared_ptr<Conn> c, std::uint64_t key_hash, std::string rest,
                                bool keyed) {
  auto d = std::make_unique<Dialing>(std::move(c), budget);
  d->snapshot = upstream.Snapshot();
  d->key_hash = key_hash;
  d->rest = std::move(rest);
  if (keyed) upstream.PassedOwners(*d->snapshot, key_hash, ThreadRandom(), d->passed);
  Dial(std::move(d));
}

Result<std::unique_ptr<TcpProxy>> TcpProxy::Start(const Workers& workers,
                                                  const ListenerConfig& config, Upstream& upstream,
                                                  Clock& clock) {
  if (workers.empty()) return InvalidArgumentError("gateway " + config.name + ": no io threads");
  auto state = std::make_shared<State>(workers, config, upstream, clock);
  net::ListenerOptions options;
  options.name = "gateway " + config.name;
  options.address = config.address;
  options.max_connections = config.max_connections;
  options.keep_alive = true;      // keepalive probes and no-delay on every client connection
  options.watch_peer_end = true;  // (Started: each side's last bytes go with their FIN)
  // Over the limit the client sees its connection closed at once and may try another gateway.
  DROVER_ASSIGN_OR_RETURN(
      std::unique_ptr<net::TcpListener> listener,
      // Accepted on every worker, each session served on one (one thread per worker: a session
      // needs no strand, which would pass each of its handlers through a second queue).
      net::TcpListener::Start(workers, std::move(options),
                              [state](tcp::socket socket, net::Connection connection) {
                                state->Serve(std::move(socket), std::move(connection));
                              }));
  return std::unique_ptr<TcpProxy>(new TcpProxy(std::move(state), std::move(listener)));
}

TcpProxy::TcpProxy(std::shared_ptr<State> state, std::unique_ptr<net::TcpListener> listener)
    : state_(std::move(state)), listener_(std::move(listener)) {}

TcpProxy::~TcpProxy() {
  StopAccepting();
  CloseAll();
}

std::uint16_t TcpProxy::port() const { return listener_->port(); }
const net::ConnectionCounters& TcpProxy::connections() const { return listener_->counters(); }
const ListenerCounters& TcpProxy::counters() const { return state_->counters; }
void TcpProxy::StopAccepting() { listener_->StopAccepting(); }
void TcpProxy::CloseAll() { listener_->CloseAll(); }

}  // namespace drover::gateway
