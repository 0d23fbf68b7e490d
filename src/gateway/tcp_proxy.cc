#include "gateway/tcp_proxy.h"

// clang-format off
#include "gateway/asio_net.h"  // first: it includes <utility> before Asio
// clang-format on

#include <spdlog/spdlog.h>

#include <array>
#include <boost/asio.hpp>
#include <future>
#include <map>
#include <mutex>

#include "drover/router.h"
#include "gateway/key_line.h"
#include "gateway/thread_random.h"
#include "gateway/upstream.h"

namespace drover::gateway {

namespace net = boost::asio;
using tcp = net::ip::tcp;
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
  net::steady_timer timer;        // connect timeout, key timeout, then the idle watchdog
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
      : workers(w), config(c), upstream(u), clock(k), acceptor(net::make_strand(*w[0])) {}

  net::awaitable<void> Accept();
  net::awaitable<void> Serve(tcp::socket client);
  net::awaitable<std::optional<std::string>> ReadKeyLine(std::shared_ptr<Conn> c,
                                                         std::string& rest);
  net::awaitable<bool> Connect(std::shared_ptr<Conn> c, const tcp::endpoint& to);
  net::awaitable<void> Pump(std::shared_ptr<Conn> c, bool from_client);
  net::awaitable<void> Watchdog(std::shared_ptr<Conn> c);

  const Workers workers;
  std::size_t next_worker = 0;  // on the acceptor's strand
  const ListenerConfig config;
  Upstream& upstream;
  Clock& clock;
  tcp::acceptor acceptor;
  std::uint16_t port = 0;
  ListenerCounters counters;

  std::mutex conns_mu;
  std::map<std::uint64_t, std::weak_ptr<Conn>> conns;  // guarded by conns_mu
  std::uint64_t next_conn = 0;                         // guarded by conns_mu
  std::once_flag stop_once;
};

net::awaitable<void> TcpProxy::State::Accept() {
  auto self = shared_from_this();
  while (true) {
    error_code ec;
    tcp::socket accepted =
        co_await acceptor.async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
      // Out of descriptors and the like: pause instead of spinning; the backlog waits.
      spdlog::warn("gateway {}: accept failed: {}", config.name, ec.message());
      net::steady_timer pause(acceptor.get_executor(), std::chrono::milliseconds(50));
      co_await pause.async_wait(net::redirect_error(net::use_awaitable, ec));
      continue;
    }
    counters.accepted.fetch_add(1, std::memory_order_relaxed);
    if (counters.active.load(std::memory_order_relaxed) >= config.max_connections) {
      // Over the limit: the client sees its connection closed at once and may try another
      // gateway; the ones already here keep their share of the process.
      counters.refused.fetch_add(1, std::memory_order_relaxed);
      accepted.close(ec);
      continue;
    }
    tcp::socket socket =
        MoveTo(std::move(accepted), net::make_strand(*workers[next_worker++ % workers.size()]));
    auto executor = socket.get_executor();
    net::co_spawn(executor, Serve(std::move(socket)), net::detached);
  }
}

net::awaitable<std::optional<std::string>> TcpProxy::State::ReadKeyLine(std::shared_ptr<Conn> c,
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
        net::buffer(buf), net::redirect_error(net::use_awaitable, ec));
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

net::awaitable<bool> TcpProxy::State::Connect(std::shared_ptr<Conn> c, const tcp::endpoint& to) {
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
  co_await c->upstream.async_connect(to, net::redirect_error(net::use_awaitable, ec));
  ++c->timer_epoch;
  c->timer.cancel();
  co_return !ec && c->upstream.is_open();
}

net::awaitable<void> TcpProxy::State::Pump(std::shared_ptr<Conn> c, bool from_client) {
  tcp::socket& from = from_client ? c->client : c->upstream;
  tcp::socket& to = from_client ? c->upstream : c->client;
  std::array<char, 16 * 1024> buf;
  while (true) {
    error_code ec;
    const std::size_t n = co_await from.async_read_some(
        net::buffer(buf), net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (ec == net::error::eof) {
        error_code ignored;
        to.shutdown(tcp::socket::shutdown_send, ignored);  // half-close: pass the FIN on
      } else {
        c->CloseBoth();
      }
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
    co_await net::async_write(to, net::buffer(buf.data(), n),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      c->CloseBoth();
      break;
    }
  }
  if (++c->pumps_done == 2) {
    c->CloseBoth();
    c->timer.cancel();  // wakes the watchdog
  }
}

net::awaitable<void> TcpProxy::State::Watchdog(std::shared_ptr<Conn> c) {
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
    co_await c->timer.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
}

net::awaitable<void> TcpProxy::State::Serve(tcp::socket client) {
  auto self = shared_from_this();
  counters.active.fetch_add(1, std::memory_order_relaxed);
  auto c = std::make_shared<Conn>(std::move(client));
  std::uint64_t conn_id = 0;
  {
    std::lock_guard lock(conns_mu);
    conn_id = next_conn++;
    conns.emplace(conn_id, c);
  }
  struct Unregister {
    State* state;
    std::uint64_t id;
    ~Unregister() {
      {
        std::lock_guard lock(state->conns_mu);
        state->conns.erase(id);
      }
      state->counters.active.fetch_sub(1, std::memory_order_relaxed);
    }
  } unregister{this, conn_id};
  SetKeepAlive(c->client);

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

  const std::shared_ptr<const UpstreamSnapshot> snapshot = upstream.Snapshot();
  std::vector<std::size_t> tried;
  bool connected = false;
  std::string last_error;
  for (int attempt = 0; attempt < config.connect_attempts && !connected; ++attempt) {
    const Result<std::size_t> pick =
        upstream.Pick(*snapshot, key_hash, tried, clock.Now(), ThreadRandom());
    if (!pick.ok()) {
      last_error = pick.status().message();
      break;
    }
    const router::Endpoint& e = snapshot->router->table->at(*pick);
    const std::shared_ptr<InstanceCounters>& counters_of = snapshot->counters[*pick];
    tried.push_back(*pick);
    const std::optional<tcp::endpoint> to = ParseEndpoint(e.address);
    const bool ok = to && co_await Connect(c, *to);
    upstream.ReportConnect(*snapshot, *pick, ok, clock.Now());
    if (ok) {
      c->counters = counters_of;
      counters_of->active.fetch_add(1, std::memory_order_relaxed);
      counters_of->connections.fetch_add(1, std::memory_order_relaxed);
      connected = true;
    } else {
      counters_of->connect_failures.fetch_add(1, std::memory_order_relaxed);
      last_error = "connect to " + e.id + " at " + e.address + " failed";
      if (!c->client.is_open()) break;  // cut meanwhile (shutdown)
    }
  }
  if (!connected) {
    counters.no_upstream.fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("gateway {}: closing a client: {}", config.name, last_error);
    c->CloseBoth();
    co_return;
  }
  SetKeepAlive(c->upstream);
  if (!rest.empty()) {
    error_code ec;
    co_await net::async_write(c->upstream, net::buffer(rest),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      c->CloseBoth();
      co_return;
    }
  }
  c->last_activity = MonoClock::now();
  auto executor = c->client.get_executor();
  net::co_spawn(executor, Pump(c, true), net::detached);
  net::co_spawn(executor, Pump(c, false), net::detached);
  co_await Watchdog(c);
}

Result<std::unique_ptr<TcpProxy>> TcpProxy::Start(const Workers& workers,
                                                  const ListenerConfig& config, Upstream& upstream,
                                                  Clock& clock) {
  if (workers.empty()) return InvalidArgumentError("gateway " + config.name + ": no io threads");
  auto state = std::make_shared<State>(workers, config, upstream, clock);
  const auto endpoint = ParseEndpoint(config.address, /*listening=*/true);
  if (!endpoint) {
    return InvalidArgumentError("gateway " + config.name + ": bad address " + config.address);
  }
  if (const error_code ec =
          Listen(state->acceptor, *endpoint, net::socket_base::max_listen_connections)) {
    return UnavailableError("gateway " + config.name + ": cannot listen on " + config.address +
                            ": " + ec.message());
  }
  state->port = state->acceptor.local_endpoint().port();
  net::co_spawn(state->acceptor.get_executor(), state->Accept(), net::detached);
  return std::unique_ptr<TcpProxy>(new TcpProxy(std::move(state)));
}

TcpProxy::TcpProxy(std::shared_ptr<State> state) : state_(std::move(state)) {}

TcpProxy::~TcpProxy() {
  StopAccepting();
  CloseAll();
}

std::uint16_t TcpProxy::port() const { return state_->port; }
const ListenerCounters& TcpProxy::counters() const { return state_->counters; }

void TcpProxy::StopAccepting() {
  std::call_once(state_->stop_once, [this] {
    if (state_->workers[0]->stopped()) {  // no io thread can touch the acceptor any more
      error_code ec;
      state_->acceptor.close(ec);
      return;
    }
    auto closed = std::make_shared<std::promise<void>>();
    auto done = closed->get_future();
    net::post(state_->acceptor.get_executor(), [state = state_, closed] {
      error_code ec;
      state->acceptor.close(ec);
      closed->set_value();
    });
    done.wait();
  });
}

void TcpProxy::CloseAll() {
  std::vector<std::shared_ptr<Conn>> open;
  {
    std::lock_guard lock(state_->conns_mu);
    for (auto& [id, weak] : state_->conns) {
      if (auto c = weak.lock()) open.push_back(std::move(c));
    }
  }
  for (auto& c : open) {
    auto executor = c->client.get_executor();
    net::post(executor, [c] { c->CloseBoth(); });
  }
}

}  // namespace drover::gateway
