#include "gateway/tcp_proxy.h"

// clang-format off
#include "net/sockets.h"  // first: it includes <utility> before Asio
// clang-format on

#include <spdlog/spdlog.h>

#include <array>
#include <boost/asio.hpp>

#include "drover/router.h"
#include "gateway/key_line.h"
#include "gateway/relay_chunk.h"
#include "gateway/thread_random.h"
#include "gateway/upstream.h"
#include "net/tcp_listener.h"

namespace drover::gateway {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// One proxied connection; every member is touched only on the connection's strand.
struct Conn {
  explicit Conn(tcp::socket c)
      : client(std::move(c)), upstream(client.get_executor()), timer(client.get_executor()) {}
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
  asio::steady_timer timer;       // connect timeout, key timeout, then the idle watchdog
  std::uint64_t timer_epoch = 0;  // a timer callback from an older phase must not act
  MonoClock::time_point last_activity{};
  // The client sent data the upstream has not answered since (response_timeout).
  bool awaiting_upstream = false;
  MonoClock::time_point awaiting_since{};
  int pumps_done = 0;
  std::shared_ptr<InstanceCounters> counters;  // the instance this connection counts against
};

struct TcpProxy::State : std::enable_shared_from_this<State> {
  State(const Workers& w, const ListenerConfig& c, Upstream& u, Clock& k)
      : workers(w), config(c), upstream(u), clock(k) {}

  asio::awaitable<void> Serve(tcp::socket client, net::Connection connection);
  asio::awaitable<std::optional<std::string>> ReadKeyLine(std::shared_ptr<Conn> c,
                                                          std::string& rest);
  asio::awaitable<bool> Connect(std::shared_ptr<Conn> c, const tcp::endpoint& to);
  // Picks and connects an instance (trying others after a failed connect); false when none
  // could be reached.
  asio::awaitable<bool> ConnectUpstream(std::shared_ptr<Conn> c, std::uint64_t key_hash);
  asio::awaitable<void> Pump(std::shared_ptr<Conn> c, bool from_client);
  asio::awaitable<void> Watchdog(std::shared_ptr<Conn> c);

  const Workers workers;
  std::size_t next_worker = 0;  // on the listener's accept strand
  const ListenerConfig config;
  Upstream& upstream;
  Clock& clock;
  ListenerCounters counters;
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

asio::awaitable<bool> TcpProxy::State::Connect(std::shared_ptr<Conn> c, const tcp::endpoint& to) {
  const std::uint64_t epoch = ++c->timer_epoch;
  c->timer.expires_after(config.connect_timeout);
  c->timer.async_wait([c, epoch](error_code ec) {
    if (!ec && c->timer_epoch == epoch) {
      error_code ignored;
      c->upstream.close(ignored);  // the pending connect completes with an error
    }
  });
  error_code ec;
  c->upstream = tcp::socket(c->client.get_executor());
  co_await c->upstream.async_connect(to, asio::redirect_error(asio::use_awaitable, ec));
  ++c->timer_epoch;
  c->timer.cancel();
  co_return !ec && c->upstream.is_open();
}

asio::awaitable<void> TcpProxy::State::Pump(std::shared_ptr<Conn> c, bool from_client) {
  tcp::socket& from = from_client ? c->client : c->upstream;
  tcp::socket& to = from_client ? c->upstream : c->client;
  error_code ec;  // both sockets are non-blocking (Serve)
  while (!ec) {
    // Move what is there, with a buffer borrowed for as long as there is something to move. The
    // reactor is edge-triggered: bytes that came before a wait was armed raise no event, so read
    // until the socket has no more before each wait.
    {
      RelayChunk chunk;
      while (true) {
        const std::size_t n = from.read_some(asio::buffer(chunk.data(), chunk.size()), ec);
        if (ec == asio::error::would_block || ec == asio::error::try_again) {
          ec = {};
          break;  // drained
        }
        if (ec == asio::error::eof) {
          error_code ignored;
          to.shutdown(tcp::socket::shutdown_send, ignored);  // half-close: pass the FIN on
          break;
        }
        if (ec) {
          c->CloseBoth();
          break;
        }
        c->last_activity = MonoClock::now();
        if (!from_client) {
          c->awaiting_upstream = false;
        } else if (!c->awaiting_upstream && config.response_timeout > Duration::zero()) {
          c->awaiting_upstream = true;
          c->awaiting_since = c->last_activity;
          c->timer.cancel();  // the watchdog recomputes its deadline
        }
        // At once when the socket takes it all (both are non-blocking), else the rest when it
        // can: most messages never go through the reactor to be written.
        const std::size_t sent = asio::write(to, asio::buffer(chunk.data(), n), ec);
        if (ec == asio::error::would_block || ec == asio::error::try_again) {
          ec = {};
          co_await asio::async_write(to, asio::buffer(chunk.data() + sent, n - sent),
                                     asio::redirect_error(asio::use_awaitable, ec));
        }
        if (ec) {
          c->CloseBoth();
          break;
        }
      }
    }
    if (ec) break;
    // Nothing to move: wait without a buffer (an idle session holds none).
    co_await from.async_wait(tcp::socket::wait_read, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) c->CloseBoth();
  }
  if (++c->pumps_done == 2) {
    c->CloseBoth();
    c->timer.cancel();  // wakes the watchdog
  }
}

asio::awaitable<void> TcpProxy::State::Watchdog(std::shared_ptr<Conn> c) {
  ++c->timer_epoch;
  bool cut = false;
  while (c->pumps_done < 2) {
    const auto now = MonoClock::now();
    auto deadline = c->last_activity + config.idle_timeout;
    bool response_due = false;
    if (c->awaiting_upstream && c->awaiting_since + config.response_timeout < deadline) {
      deadline = c->awaiting_since + config.response_timeout;
      response_due = true;
    }
    if (!cut && now >= deadline) {
      // Nothing either way for idle_timeout, or an upstream that stopped answering (a frozen
      // process keeps its sockets open and its kernel keeps acknowledging).
      cut = true;
      (response_due ? counters.response_timeouts : counters.idle_timeouts)
          .fetch_add(1, std::memory_order_relaxed);
      c->CloseBoth();  // the pumps end; the last one cancels the timer
    }
    c->timer.expires_at(cut ? now + std::chrono::hours(1) : deadline);
    error_code ec;
    co_await c->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<bool> TcpProxy::State::ConnectUpstream(std::shared_ptr<Conn> c,
                                                       std::uint64_t key_hash) {
  const std::shared_ptr<const UpstreamSnapshot> snapshot = upstream.Snapshot();
  std::vector<std::size_t> tried;
  std::string last_error;
  for (int attempt = 0; attempt < config.connect_attempts; ++attempt) {
    const Result<std::size_t> pick =
        upstream.Pick(*snapshot, key_hash, tried, clock.Now(), ThreadRandom());
    if (!pick.ok()) {
      last_error = pick.status().message();
      break;
    }
    const router::Endpoint& e = snapshot->router->table->at(*pick);
    const std::shared_ptr<InstanceCounters>& counters_of = snapshot->counters[*pick];
    tried.push_back(*pick);
    const auto to = net::ParseEndpoint(e.address, "instance address");
    const bool ok = to.ok() && co_await Connect(c, *to);
    upstream.ReportConnect(*snapshot, *pick, ok, clock.Now());
    if (ok) {
      c->counters = counters_of;
      counters_of->active.fetch_add(1, std::memory_order_relaxed);
      counters_of->connections.fetch_add(1, std::memory_order_relaxed);
      co_return true;
    }
    counters_of->connect_failures.fetch_add(1, std::memory_order_relaxed);
    last_error = "connect to " + e.id + " at " + e.address + " failed";
    if (!c->client.is_open()) break;  // cut meanwhile (shutdown)
  }
  counters.no_upstream.fetch_add(1, std::memory_order_relaxed);
  spdlog::debug("gateway {}: closing a client: {}", config.name, last_error);
  co_return false;
}

asio::awaitable<void> TcpProxy::State::Serve(tcp::socket client, net::Connection connection) {
  auto self = shared_from_this();
  auto c = std::make_shared<Conn>(std::move(client));
  connection.OnClose([c](net::CloseReason reason) {
    if (reason == net::CloseReason::kCloseNow) c->CloseBoth();
  });

  std::string rest;  // bytes the client sent after its key line
  std::uint64_t key_hash = 0;
  if (config.policy == Policy::kHash) {
    const std::optional<std::string> key = co_await ReadKeyLine(c, rest);
    if (!key) {
      counters.bad_key.fetch_add(1, std::memory_order_relaxed);
      c->CloseBoth();
      co_return;
    }
    key_hash = router::HashKey(*key);
  }
  if (!co_await ConnectUpstream(c, key_hash)) {
    c->CloseBoth();
    co_return;
  }
  net::SetKeepAlive(c->upstream);
  if (!rest.empty()) {
    error_code ec;
    co_await asio::async_write(c->upstream, asio::buffer(rest),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      c->CloseBoth();
      co_return;
    }
  }
  c->last_activity = MonoClock::now();
  // Both non-blocking before either pump runs: a pump reads its side with read_some and writes
  // the other side at once where it can, and neither may ever block the io thread.
  error_code nb_client, nb_upstream;
  c->client.non_blocking(true, nb_client);
  c->upstream.non_blocking(true, nb_upstream);
  if (nb_client || nb_upstream) {
    c->CloseBoth();
    co_return;
  }
  auto executor = c->client.get_executor();
  asio::co_spawn(executor, Pump(c, true), asio::detached);
  asio::co_spawn(executor, Pump(c, false), asio::detached);
  co_await Watchdog(c);
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
  options.keep_alive = true;  // keepalive probes and no-delay on every client connection
  // Over the limit the client sees its connection closed at once and may try another gateway.
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<net::TcpListener> listener,
                          net::TcpListener::Start(
                              *workers[0], std::move(options),
                              [raw = state.get()] {
                                return asio::any_io_executor(asio::make_strand(
                                    *raw->workers[raw->next_worker++ % raw->workers.size()]));
                              },
                              [state](tcp::socket socket, net::Connection connection) {
                                return state->Serve(std::move(socket), std::move(connection));
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
