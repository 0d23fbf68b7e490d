#include "gateway/gateway.h"

// clang-format off
#include "gateway/asio_net.h"  // first: it includes <utility> before Asio
// clang-format on

#include <spdlog/spdlog.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/metrics_text.h"
#include "gateway/health_check.h"
#include "gateway/tcp_proxy.h"
#include "gateway/upstream.h"

namespace drover::gateway {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

namespace {

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

std::string MetricsTextOf(const Gateway::Impl& g);
std::string SnapshotJsonOf(const Gateway::Impl& g);
bool ReadyOf(const Gateway::Impl& g);

}  // namespace

struct Gateway::Impl {
  explicit Impl(GatewayConfig c, Clock& k)
      : config(std::move(c)),
        clock(k),
        io(config.threads),
        admin_acceptor(net::make_strand(io)),
        work(net::make_work_guard(io)) {}

  net::awaitable<void> AdminAccept();
  net::awaitable<void> AdminSession(tcp::socket socket);

  GatewayConfig config;
  Clock& clock;
  net::io_context io;
  tcp::acceptor admin_acceptor;
  std::uint16_t admin_port = 0;
  net::executor_work_guard<net::io_context::executor_type> work;
  std::vector<std::unique_ptr<Upstream>> upstreams;  // per listener, same order
  std::vector<std::unique_ptr<TcpProxy>> proxies;    // per listener
  std::vector<std::thread> threads;
  std::once_flag shutdown_once;
};

net::awaitable<void> Gateway::Impl::AdminAccept() {
  while (true) {
    error_code ec;
    tcp::socket socket = co_await admin_acceptor.async_accept(
        net::make_strand(io), net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (ec == net::error::operation_aborted || !admin_acceptor.is_open()) co_return;
      continue;
    }
    auto executor = socket.get_executor();
    net::co_spawn(executor, AdminSession(std::move(socket)), net::detached);
  }
}

net::awaitable<void> Gateway::Impl::AdminSession(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  while (true) {
    stream.expires_after(std::chrono::seconds(30));
    http::request<http::string_body> req;
    error_code ec;
    co_await http::async_read(stream, buffer, req, net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    http::response<http::string_body> res;
    res.version(req.version());
    res.keep_alive(req.keep_alive());
    res.set(http::field::cache_control, "no-cache");
    const std::string_view target(req.target().data(), req.target().size());
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      res.result(http::status::method_not_allowed);
      res.body() = "GET or HEAD\n";
    } else if (target == "/metrics") {
      res.set(http::field::content_type, "text/plain; version=0.0.4");
      res.body() = MetricsTextOf(*this);
    } else if (target == "/admin/snapshot") {
      res.set(http::field::content_type, "application/json");
      res.body() = SnapshotJsonOf(*this);
    } else if (target == "/live") {
      res.body() = "live\n";
    } else if (target == "/ready") {
      const bool ready = ReadyOf(*this);
      res.result(ready ? http::status::ok : http::status::service_unavailable);
      res.body() = ready ? "ready\n" : "not ready: waiting for the registry\n";
    } else {
      res.result(http::status::not_found);
      res.body() = "try /metrics, /admin/snapshot, /live or /ready\n";
    }
    if (req.method() == http::verb::head) {
      res.content_length(res.body().size());
      res.body().clear();
    } else {
      res.prepare_payload();
    }
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
    if (ec || !res.keep_alive()) break;
  }
  error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

namespace {

std::string MetricsTextOf(const Gateway::Impl& g) {
  metrics::TextWriter out;
  for (std::size_t i = 0; i < g.proxies.size(); ++i) {
    const ListenerConfig& l = g.config.listeners[i];
    const ListenerCounters& c = g.proxies[i]->counters();
    const metrics::Labels labels{{"listener", l.name}, {"service", l.service}};
    out.Counter("drover_gateway_accepted_total", "Client connections accepted.",
                static_cast<double>(c.accepted.load()), labels);
    out.Gauge("drover_gateway_active_connections", "Client connections open now.",
              static_cast<double>(c.active.load()), labels);
    out.Counter("drover_gateway_no_upstream_total",
                "Client connections closed because no instance could be connected.",
                static_cast<double>(c.no_upstream.load()), labels);
    out.Counter("drover_gateway_bad_key_total",
                "Client connections closed for a missing or malformed DROVER-KEY line.",
                static_cast<double>(c.bad_key.load()), labels);
    out.Counter("drover_gateway_idle_timeouts_total", "Connections closed after the idle timeout.",
                static_cast<double>(c.idle_timeouts.load()), labels);
    out.Counter("drover_gateway_response_timeouts_total",
                "Connections closed because the upstream stopped answering.",
                static_cast<double>(c.response_timeouts.load()), labels);
    const auto snapshot = g.upstreams[i]->Snapshot();
    out.Gauge("drover_gateway_routing_table_version",
              "Registry revision of the routing table in use.",
              static_cast<double>(snapshot->version()), labels);
    const Duration age = g.upstreams[i]->DiscoveryAge();
    if (age != Duration::max()) {
      out.Gauge("drover_gateway_discovery_age_seconds",
                "Time since the registry last confirmed the routing table.", Seconds(age), labels);
    }
    const auto& table = *snapshot->router->table;
    for (std::size_t k = 0; k < table.size(); ++k) {
      const InstanceCounters& ic = *snapshot->counters[k];
      metrics::Labels il = labels;
      il.emplace_back("instance", table.at(k).id);
      out.Gauge("drover_gateway_upstream_active_connections",
                "Proxied connections open to the instance.", static_cast<double>(ic.active.load()),
                il);
      out.Counter("drover_gateway_upstream_connections_total",
                  "Proxied connections to the instance.",
                  static_cast<double>(ic.connections.load()), il);
      out.Gauge("drover_gateway_upstream_healthy",
                "1 while the instance passes active /ready checks and is not ejected.",
                ic.unhealthy.load() || ic.Ejected(g.clock.Now()) ? 0 : 1, il);
      out.Counter("drover_gateway_upstream_ejections_total",
                  "Times the instance was ejected for failed connects.",
                  static_cast<double>(ic.ejections_total.load()), il);
      out.Counter("drover_gateway_upstream_failed_checks_total", "Failed /ready checks.",
                  static_cast<double>(ic.checks_failed.load()), il);
      out.Counter("drover_gateway_upstream_connect_failures_total",
                  "Connects to the instance that failed or timed out.",
                  static_cast<double>(ic.connect_failures.load()), il);
    }
  }
  return out.Take();
}

std::string SnapshotJsonOf(const Gateway::Impl& g) {
  nlohmann::json listeners = nlohmann::json::array();
  const MonoTime now = g.clock.Now();
  for (std::size_t i = 0; i < g.upstreams.size(); ++i) {
    const ListenerConfig& l = g.config.listeners[i];
    const auto snapshot = g.upstreams[i]->Snapshot();
    const auto& table = *snapshot->router->table;
    nlohmann::json instances = nlohmann::json::array();
    for (std::size_t k = 0; k < table.size(); ++k) {
      const router::Endpoint& e = table.at(k);
      instances.push_back({{"id", e.id},
                           {"address", e.address},
                           {"state", std::string(router::EndpointStateName(e.state))},
                           {"accepting", e.accepting},
                           {"generation", e.generation},
                           {"weight", e.weight},
                           {"effective_weight", snapshot->router->p2c.EffectiveWeight(k, now)},
                           {"routable", e.Routable()},
                           {"health", e.health},
                           {"healthy", !snapshot->counters[k]->unhealthy.load()},
                           {"ejected", snapshot->counters[k]->Ejected(now)},
                           {"active", snapshot->counters[k]->active.load()},
                           {"connections", snapshot->counters[k]->connections.load()}});
    }
    const Duration age = g.upstreams[i]->DiscoveryAge();
    listeners.push_back(
        {{"name", l.name},
         {"service", l.service},
         {"policy", std::string(PolicyName(l.policy))},
         {"port", g.proxies[i]->port()},
         {"version", snapshot->version()},
         {"discovered", snapshot->discovered},
         {"discovery_age_seconds",
          age == Duration::max() ? nlohmann::json(nullptr) : nlohmann::json(Seconds(age))},
         {"instances", std::move(instances)}});
  }
  return nlohmann::json{{"listeners", std::move(listeners)}}.dump(2) + "\n";
}

bool ReadyOf(const Gateway::Impl& g) {
  for (const auto& u : g.upstreams) {
    if (!u->Snapshot()->discovered) return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<Gateway>> Gateway::Start(GatewayConfig config, Clock& clock) {
  if (Status s = ValidateGatewayConfig(config); !s.ok()) return s;
  if (config.threads == 0)
    config.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto impl = std::make_unique<Impl>(std::move(config), clock);
  // Nothing runs the io_context yet: mark it stopped so that the listeners already bound close
  // directly instead of posting to a loop that will never run.
  const auto fail = [&impl](Status status) {
    impl->io.stop();
    return status;
  };
  for (const ListenerConfig& l : impl->config.listeners) {
    auto upstream = Upstream::Start(impl->config, l, clock);
    if (!upstream.ok()) return fail(upstream.status());
    auto proxy = TcpProxy::Start(impl->io, l, **upstream, clock);
    if (!proxy.ok()) return fail(proxy.status());
    StartHealthChecks(impl->io, **upstream);
    impl->upstreams.push_back(std::move(*upstream));
    impl->proxies.push_back(std::move(*proxy));
  }
  if (!impl->config.admin.empty()) {
    const std::string& a = impl->config.admin;
    const auto endpoint = ParseEndpoint(a, /*listening=*/true);  // validated with the config
    const error_code ec = endpoint ? Listen(impl->admin_acceptor, *endpoint, 64)
                                   : make_error_code(net::error::invalid_argument);
    if (ec) {
      return fail(
          UnavailableError("gateway: cannot listen for admin on " + a + ": " + ec.message()));
    }
    impl->admin_port = impl->admin_acceptor.local_endpoint().port();
    net::co_spawn(impl->admin_acceptor.get_executor(), impl->AdminAccept(), net::detached);
  }
  for (int i = 0; i < impl->config.threads; ++i) {
    impl->threads.emplace_back([io = &impl->io] { io->run(); });
  }
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Gateway::~Gateway() { Shutdown(); }

std::uint16_t Gateway::port(const std::string& listener) const {
  for (std::size_t i = 0; i < impl_->config.listeners.size(); ++i) {
    if (impl_->config.listeners[i].name == listener) return impl_->proxies[i]->port();
  }
  return 0;
}

std::uint16_t Gateway::admin_port() const { return impl_->admin_port; }
const GatewayConfig& Gateway::config() const { return impl_->config; }
std::string Gateway::MetricsText() const { return MetricsTextOf(*impl_); }
std::string Gateway::SnapshotJson() const { return SnapshotJsonOf(*impl_); }
bool Gateway::Ready() const { return ReadyOf(*impl_); }

std::uint64_t Gateway::active() const {
  std::uint64_t n = 0;
  for (const auto& p : impl_->proxies) n += p->counters().active.load();
  return n;
}

void Gateway::Shutdown() {
  std::call_once(impl_->shutdown_once, [this] {
    Impl& g = *impl_;
    const MonoTime t0 = g.clock.Now();
    for (auto& p : g.proxies) p->StopAccepting();
    spdlog::info("gateway: stopped accepting; {} connections open, draining up to {:.1f} s",
                 active(), Seconds(g.config.drain));
    const MonoTime deadline = t0 + g.config.drain;
    while (active() > 0 && g.clock.Now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const std::uint64_t cut = active();
    for (auto& p : g.proxies) p->CloseAll();
    net::post(g.admin_acceptor.get_executor(), [&g] {
      error_code ec;
      g.admin_acceptor.close(ec);
    });
    // Let the cut connections unwind, then stop the loop whatever is left.
    const MonoTime unwind = g.clock.Now() + std::chrono::seconds(2);
    while (active() > 0 && g.clock.Now() < unwind) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    g.work.reset();
    g.io.stop();
    for (auto& t : g.threads) t.join();
    for (auto& u : g.upstreams) u->Stop();
    spdlog::info("gateway: shut down in {:.1f} s ({} connections cut at the deadline)",
                 Seconds(g.clock.Now() - t0), cut);
  });
}

}  // namespace drover::gateway
