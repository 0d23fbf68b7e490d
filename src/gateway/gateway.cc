#include "gateway/gateway.h"

// clang-format off
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including it
// clang-format on

#include <spdlog/spdlog.h>

#include <boost/asio.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/cpu_affinity.h"
#include "common/host_port.h"
#include "common/metrics_text.h"
#include "common/text.h"
#include "common/thread_name.h"
#include "gateway/health_check.h"
#include "gateway/http_proxy.h"
#include "gateway/tcp_proxy.h"
#include "gateway/upstream.h"
#include "net/http_server.h"
#include "net/sockets.h"
#include "sdk/self_registration.h"
#include "sdk/socket_util.h"

namespace drover::gateway {

namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

std::string MetricsTextOf(const Gateway::Impl& g);
std::string SnapshotJsonOf(const Gateway::Impl& g);
bool ReadyOf(const Gateway::Impl& g);
std::string NotReadyReason(const Gateway::Impl& g);

}  // namespace

struct Gateway::Impl {
  explicit Impl(GatewayConfig c, Clock& k)
      : config(std::move(c)), clock(k), ios(MakeContexts(config.threads)) {
    for (auto& io : ios) {
      workers.push_back(io.get());
      work.push_back(asio::make_work_guard(*io));
    }
  }
  // Destroyed last first: the first context (acceptors, admin, health checks) must outlive the
  // others, whose objects (a connection's last reference to its listener) point into it.
  struct IoContexts : std::vector<std::unique_ptr<asio::io_context>> {
    IoContexts() = default;
    IoContexts(IoContexts&&) = default;
    IoContexts& operator=(IoContexts&&) = default;
    ~IoContexts() {
      while (!empty()) pop_back();
    }
  };
  static IoContexts MakeContexts(int n) {
    IoContexts ios;
    for (int i = 0; i < n; ++i) {
      ios.push_back(std::make_unique<asio::io_context>(1));
      // Workers run until stopped: their upstream connects' deadlines keep one timer armed.
      net::KeepConnectTimerArmed(*ios.back());
    }
    return ios;
  }
  void StopAll() {
    work.clear();
    for (auto& io : ios) io->stop();
  }

  // The admin port's answer to one request.
  net::HttpResponse Admin(const net::HttpRequest& req) const;

  GatewayConfig config;
  Clock& clock;
  IoContexts ios;  // one per io thread
  Workers workers;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work;
  // One per tcp listener, one per route of an http listener.
  struct UpstreamEntry {
    std::string listener;
    std::string route;  // the path prefix (http); empty for tcp
    std::unique_ptr<Upstream> upstream;
  };
  std::vector<UpstreamEntry> upstreams;
  std::vector<std::unique_ptr<Listener>> proxies;  // per listener, same order
  std::unique_ptr<net::HttpServer> admin;          // its own thread; null without an admin port
  std::unique_ptr<sdk::SelfRegistration> registration;  // as drover-gateway, with the admin port
  std::vector<std::thread> threads;
  std::once_flag shutdown_once;
};

net::HttpResponse Gateway::Impl::Admin(const net::HttpRequest& req) const {
  net::HttpResponse res;
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
    const std::string why = NotReadyReason(*this);
    res.result(why.empty() ? http::status::ok : http::status::service_unavailable);
    res.body() = why.empty() ? "ready\n" : "not ready: " + why + "\n";
  } else {
    res.result(http::status::not_found);
    res.body() = "try /metrics, /admin/snapshot, /live or /ready\n";
  }
  if (req.method() == http::verb::get || req.method() == http::verb::head) {
    // Every admin endpoint only reads: the registry's dashboard, another origin, polls them
    // from the browser.
    res.set(http::field::access_control_allow_origin, "*");
  }
  if (req.method() == http::verb::head) {
    res.content_length(res.body().size());
    res.body().clear();
  } else {
    res.prepare_payload();
  }
  return res;
}

namespace {

void Count(metrics::TextWriter& out, const char* name, const char* help,
           const std::atomic<std::uint64_t>& v, const metrics::Labels& labels) {
  out.Counter(name, help, static_cast<double>(v.load()), labels);
}

// What only an http listener counts: requests, retries and its upstream connection pool.
void WriteHttpListenerMetrics(metrics::TextWriter& out, const HttpProxy& proxy,
                              const ListenerCounters& c, const metrics::Labels& labels) {
  Count(out, "drover_gateway_http_requests_total", "HTTP request heads read.", c.requests, labels);
  Count(out, "drover_gateway_http_bad_requests_total", "Requests answered 400 or 431.",
        c.bad_requests, labels);
  Count(out, "drover_gateway_http_no_route_total", "Requests answered 404: no route for the path.",
        c.no_route, labels);
  Count(out, "drover_gateway_http_retries_total", "Request attempts on a further instance.",
        c.retries, labels);
  Count(out, "drover_gateway_http_retry_budget_exhausted_total",
        "Retries refused because the retry budget was spent.", c.budget_exhausted, labels);
  Count(out, "drover_gateway_http_upstream_connects_total", "New upstream connections.",
        c.upstream_connects, labels);
  Count(out, "drover_gateway_http_upstream_reused_total",
        "Requests sent on a pooled keep-alive connection.", c.upstream_reused, labels);
  const UpstreamPool::Stats pool = proxy.pool_stats();
  out.Gauge("drover_gateway_http_pool_idle_connections", "Idle pooled upstream connections.",
            static_cast<double>(pool.idle), labels);
  out.Counter("drover_gateway_http_pool_retired_total",
              "Pooled upstream connections closed, by reason.",
              static_cast<double>(pool.retired_age),
              metrics::Labels{labels[0], labels[1], {"reason", "max_age"}});
  out.Counter("drover_gateway_http_pool_retired_total",
              "Pooled upstream connections closed, by reason.",
              static_cast<double>(pool.retired_idle),
              metrics::Labels{labels[0], labels[1], {"reason", "idle"}});
  out.Counter("drover_gateway_http_pool_retired_total",
              "Pooled upstream connections closed, by reason.",
              static_cast<double>(pool.retired_closed),
              metrics::Labels{labels[0], labels[1], {"reason", "closed_by_peer"}});
}

void WriteListenerMetrics(metrics::TextWriter& out, const ListenerConfig& l,
                          const Listener& proxy) {
  const ListenerCounters& c = proxy.counters();
  const net::ConnectionCounters& connections = proxy.connections();
  const metrics::Labels labels{{"listener", l.name},
                               {"protocol", std::string(ProtocolName(l.protocol))}};
  Count(out, "drover_gateway_accepted_total", "Client connections accepted.", connections.accepted,
        labels);
  out.Gauge("drover_gateway_active_connections", "Client connections open now.",
            static_cast<double>(connections.active.load()), labels);
  Count(out, "drover_gateway_no_upstream_total",
        "Clients turned away because no instance could be reached (tcp: closed; http: 502/503).",
        c.no_upstream, labels);
  Count(out, "drover_gateway_idle_timeouts_total", "Connections closed after the idle timeout.",
        c.idle_timeouts, labels);
  Count(out, "drover_gateway_refused_connections_total",
        "Client connections refused for being over max_connections.", connections.refused, labels);
  Count(out, "drover_gateway_response_timeouts_total",
        "Upstreams that stopped answering (tcp: connection closed; http: 504).",
        c.response_timeouts, labels);
  if (l.protocol == Protocol::kTcp) {
    Count(out, "drover_gateway_bad_key_total",
          "Client connections closed for a missing or malformed DROVER-KEY line.", c.bad_key,
          labels);
    Count(out, "drover_gateway_tcp_connect_retries_total",
          "Connects to a further instance after a failed one.", c.retries, labels);
    Count(out, "drover_gateway_tcp_retry_budget_exhausted_total",
          "Connects to a further instance refused because the retry budget was spent.",
          c.budget_exhausted, labels);
    return;
  }
  WriteHttpListenerMetrics(out, static_cast<const HttpProxy&>(proxy), c, labels);
}

void WriteInstanceMetrics(metrics::TextWriter& out, const InstanceCounters& ic,
                          const metrics::Labels& il, Clock& clock) {
  out.Gauge("drover_gateway_upstream_active",
            "Proxied connections (tcp) or requests in flight (http) at the instance.",
            static_cast<double>(ic.active.load()), il);
  Count(out, "drover_gateway_upstream_connections_total", "Connections made to the instance.",
        ic.connections, il);
  Count(out, "drover_gateway_upstream_requests_total", "HTTP requests sent to the instance.",
        ic.requests, il);
  Count(out, "drover_gateway_upstream_failed_requests_total",
        "HTTP requests the instance reset, left unanswered or answered 5xx.", ic.failed_requests,
        il);
  out.Gauge("drover_gateway_upstream_healthy",
            "1 while the instance passes active /ready checks and is not ejected.",
            ic.unhealthy.load() || ic.Ejected(clock.Now()) ? 0 : 1, il);
  Count(out, "drover_gateway_upstream_ejections_total",
        "Times the instance was ejected for failed connects or requests.", ic.ejections_total, il);
  Count(out, "drover_gateway_upstream_failed_checks_total", "Failed /ready checks.",
        ic.checks_failed, il);
  Count(out, "drover_gateway_upstream_connect_failures_total",
        "Connects to the instance that failed or timed out.", ic.connect_failures, il);
}

void WriteUpstreamMetrics(metrics::TextWriter& out, const Gateway::Impl::UpstreamEntry& u,
                          Clock& clock) {
  metrics::Labels labels{{"listener", u.listener}, {"service", u.upstream->listener().service}};
  if (!u.route.empty()) labels.emplace_back("route", u.route);
  const auto snapshot = u.upstream->Snapshot();
  out.Gauge("drover_gateway_routing_table_version",
            "Registry revision of the routing table in use.",
            static_cast<double>(snapshot->version()), labels);
  out.Gauge("drover_gateway_migration_step",
            "Step of the staged key migration under way (0: none; keys move at their step).",
            static_cast<double>(snapshot->migration_step), labels);
  const Duration age = u.upstream->DiscoveryAge();
  if (age != Duration::max()) {
    out.Gauge("drover_gateway_discovery_age_seconds",
              "Time since the registry last confirmed the routing table.", Seconds(age), labels);
    if (u.upstream->hot_keys().enabled()) {
      const std::vector<router::HotKey> hot = u.upstream->HotKeys();
      out.Gauge("drover_gateway_hot_keys",
                "Keys spread over several owners for carrying more than hot_key_fraction.",
                static_cast<double>(hot.size()), labels);
      for (const router::HotKey& k : hot) {
        metrics::Labels with_key = labels;
        with_key.emplace_back("key", EscapeBytes(k.key));
        out.Gauge("drover_gateway_hot_key_share", "A hot key's share of the recent keyed traffic.",
                  k.share, with_key);
      }
    }
    out.Gauge("drover_gateway_discovery_stale",
              "1 while the routing table is older than max_stale (still routed on; /ready 503).",
              u.upstream->DiscoveryStale() ? 1 : 0, labels);
  }
  if (const auto figures = u.upstream->DiscoveryFigures()) {
    out.Gauge("drover_gateway_discovery_connected", "1 while a watch stream to a registry is live.",
              figures->connected ? 1 : 0, labels);
    out.Gauge("drover_gateway_discovery_longest_gap_seconds",
              "Longest time without a live watch stream since the first one.",
              Seconds(figures->longest_gap), labels);
    out.Counter("drover_gateway_discovery_watches_total",
                "Watch streams a registry accepted (each failover or reconnect adds one).",
                static_cast<double>(figures->watches), labels);
  }
  const auto& table = *snapshot->router->table;
  for (std::size_t k = 0; k < table.size(); ++k) {
    metrics::Labels il = labels;
    il.emplace_back("instance", table.at(k).id);
    WriteInstanceMetrics(out, *snapshot->counters[k], il, clock);
  }
}

std::string MetricsTextOf(const Gateway::Impl& g) {
  metrics::TextWriter out;
  for (std::size_t i = 0; i < g.proxies.size(); ++i) {
    WriteListenerMetrics(out, g.config.listeners[i], *g.proxies[i]);
  }
  for (const Gateway::Impl::UpstreamEntry& u : g.upstreams) WriteUpstreamMetrics(out, u, g.clock);
  return out.Take();
}

nlohmann::json UpstreamJson(const Upstream& upstream, MonoTime now) {
  const auto snapshot = upstream.Snapshot();
  const auto& table = *snapshot->router->table;
  nlohmann::json instances = nlohmann::json::array();
  for (std::size_t k = 0; k < table.size(); ++k) {
    const router::Endpoint& e = table.at(k);
    const InstanceCounters& ic = *snapshot->counters[k];
    // Null when READY since before the gateway learned of it (no slow start applies).
    const nlohmann::json ready_for =
        e.ready_since ? nlohmann::json(Seconds(now - *e.ready_since)) : nlohmann::json(nullptr);
    instances.push_back({{"id", e.id},
                         {"address", e.address},
                         {"state", std::string(router::EndpointStateName(e.state))},
                         {"accepting", e.accepting},
                         {"generation", e.generation},
                         {"weight", e.weight},
                         {"effective_weight", snapshot->router->p2c.EffectiveWeight(k, now)},
                         {"routable", e.Routable()},
                         {"health", e.health},
                         {"healthy", !ic.unhealthy.load()},
                         {"ejected", ic.Ejected(now)},
                         {"active", ic.active.load()},
                         {"connections", ic.connections.load()},
                         {"requests", ic.requests.load()},
                         {"ready_for_seconds", ready_for}});
  }
  const Duration age = upstream.DiscoveryAge();
  const ListenerConfig& l = upstream.listener();
  nlohmann::json hot = nlohmann::json::array();
  for (const router::HotKey& k : upstream.HotKeys()) {
    hot.push_back({{"key", EscapeBytes(k.key)}, {"share", k.share}, {"owners", l.hot_key_owners}});
  }
  return {
      {"service", l.service},
      {"policy", std::string(PolicyName(l.policy))},
      {"slow_start_seconds", l.policy == Policy::kP2c ? Seconds(l.slow_start) : 0.0},
      {"version", snapshot->version()},
      {"discovered", snapshot->discovered},
      {"discovery_age_seconds",
       age == Duration::max() ? nlohmann::json(nullptr) : nlohmann::json(Seconds(age))},
      {"instances", std::move(instances)},
      {"migration", snapshot->migration
                        ? nlohmann::json{{"from_version", snapshot->migration->from().version()},
                                         {"to_version", snapshot->version()},
                                         {"step", snapshot->migration_step},
                                         {"steps", snapshot->migration->steps()}}
                        : nlohmann::json(nullptr)},
      {"hot_key_fraction", upstream.hot_keys().enabled() ? l.hot_key_fraction : 0.0},
      {"hot_keys", std::move(hot)}};
}

std::string SnapshotJsonOf(const Gateway::Impl& g) {
  nlohmann::json listeners = nlohmann::json::array();
  const MonoTime now = g.clock.Now();
  for (std::size_t i = 0; i < g.proxies.size(); ++i) {
    const ListenerConfig& l = g.config.listeners[i];
    nlohmann::json listener = {{"name", l.name},
                               {"protocol", std::string(ProtocolName(l.protocol))},
                               {"port", g.proxies[i]->port()}};
    nlohmann::json routes = nlohmann::json::array();
    for (const Gateway::Impl::UpstreamEntry& u : g.upstreams) {
      if (u.listener != l.name) continue;
      nlohmann::json view = UpstreamJson(*u.upstream, now);
      if (l.protocol == Protocol::kTcp) {
        listener.update(view);
      } else {
        view["prefix"] = u.route;
        routes.push_back(std::move(view));
      }
    }
    if (l.protocol == Protocol::kHttp) listener["routes"] = std::move(routes);
    listeners.push_back(std::move(listener));
  }
  return nlohmann::json{{"listeners", std::move(listeners)}}.dump(2) + "\n";
}

// Why the gateway is not ready, or "" when it is: a listener still waiting for its first table,
// or one whose table is older than max_stale (routed on all the same).
std::string NotReadyReason(const Gateway::Impl& g) {
  for (const auto& u : g.upstreams) {
    if (!u.upstream->Snapshot()->discovered) return "waiting for the registry";
  }
  for (const auto& u : g.upstreams) {
    if (u.upstream->DiscoveryStale()) {
      return fmt::format(
          "the registry has not been heard for {:.0f} s (max_stale {:.0f} s; listener {}, "
          "service {}); still routing on the last table",
          Seconds(u.upstream->DiscoveryAge()), Seconds(g.config.max_stale), u.listener,
          u.upstream->listener().service);
    }
  }
  return {};
}

bool ReadyOf(const Gateway::Impl& g) { return NotReadyReason(g).empty(); }

}  // namespace

namespace {

// The gateway as an instance of drover-gateway: its admin endpoint, where the dashboard (through
// the registry) reads its routing tables and counters.
HostOptions RegistrationOf(const Gateway::Impl& g) {
  using namespace std::chrono_literals;
  const GatewayConfig& c = g.config;
  HostPort admin = ParseHostPort(c.admin, "admin", {.allow_port_zero = true})
                       .value_or(HostPort{})
                       .WithPort(g.admin->port());
  if (admin.IsWildcard()) {
    const std::string routable = sdk::FirstRoutableIpv4();
    admin.host = routable.empty() ? "127.0.0.1" : routable;
    admin.kind = HostKind::kIpv4;
  }
  const std::string advertised = c.advertise.empty() ? admin.ToString() : c.advertise;
  HostOptions o;
  o.registry = c.registry;
  o.registry_ca = c.registry_ca;
  o.token = c.token;
  o.service = kGatewayService;
  o.instance_id =
      c.name.empty() ? "gateway-" + admin.host + "-" + std::to_string(admin.port) : c.name;
  o.advertise = advertised;
  o.labels["scheme"] = "http";
  o.labels["listeners"] = std::to_string(c.listeners.size());
  o.health = "";             // the admin port's /ready is the probe
  o.stop_accepting = [] {};  // leaving discovery stops nothing: the proxies drain on their own
  o.drain = [](Duration) {};
  o.propagation_delay = 0s;
  o.drain_deadline = 0s;
  o.grace_period = 5s;
  return o;
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
    impl->StopAll();
    return status;
  };
  for (const ListenerConfig& l : impl->config.listeners) {
    std::vector<Upstream*> route_upstreams;
    const std::size_t count = l.protocol == Protocol::kTcp ? 1 : l.routes.size();
    for (std::size_t r = 0; r < count; ++r) {
      const bool is_tcp = l.protocol == Protocol::kTcp;
      auto upstream =
          Upstream::Start(impl->config, is_tcp ? l : RouteUpstreamConfig(l, l.routes[r]), clock);
      if (!upstream.ok()) return fail(upstream.status());
      route_upstreams.push_back(upstream->get());
      impl->upstreams.push_back({l.name, is_tcp ? "" : l.routes[r].prefix, std::move(*upstream)});
    }
    const auto start = [&]() -> Result<std::unique_ptr<Listener>> {
      if (l.protocol == Protocol::kTcp) {
        auto p = TcpProxy::Start(impl->workers, l, *route_upstreams[0], clock);
        if (!p.ok()) return p.status();
        return std::unique_ptr<Listener>(std::move(*p));
      }
      auto p = HttpProxy::Start(impl->workers, l, route_upstreams, clock);
      if (!p.ok()) return p.status();
      return std::unique_ptr<Listener>(std::move(*p));
    };
    Result<std::unique_ptr<Listener>> proxy = start();
    if (!proxy.ok()) return fail(proxy.status());
    for (Upstream* u : route_upstreams) StartHealthChecks(*impl->ios[0], *u);
    impl->proxies.push_back(std::move(*proxy));
  }
  if (!impl->config.admin.empty()) {
    net::HttpServerOptions admin;
    admin.name = "gateway";
    admin.address = impl->config.admin;
    admin.threads = 1;
    admin.max_connections = 64;
    admin.idle_timeout = std::chrono::seconds(30);
    const Impl* raw = impl.get();
    auto server = net::HttpServer::Start(
        std::move(admin),
        [raw](const net::HttpRequest& req, const std::string&) { return raw->Admin(req); });
    if (!server.ok()) {
      return fail(UnavailableError("gateway: cannot serve admin on " + impl->config.admin + ": " +
                                   server.status().message()));
    }
    impl->admin = std::move(*server);
    if (impl->config.register_self) {
      impl->registration = sdk::SelfRegistration::Start("gateway", RegistrationOf(*impl));
    }
  }
  // Busy io threads kept off each other's CPUs: two on one CPU take turns a scheduler tick at a
  // time, and each one's clients wait out the other's turn (common/cpu_affinity.h).
  std::vector<std::vector<int>> cpus;
  if (impl->config.cpu_affinity == "spread") {
    cpus = SpreadCpus(AllowedCpus(), static_cast<int>(impl->ios.size()));
  }
  if (!cpus.empty()) {
    std::string shares;
    for (const std::vector<int>& set : cpus) shares += (shares.empty() ? "" : " | ") + CpuList(set);
    spdlog::info("gateway: {} io threads, each on its own CPUs ({})", cpus.size(), shares);
  }
  for (std::size_t i = 0; i < impl->ios.size(); ++i) {
    std::vector<int> set = cpus.empty() ? std::vector<int>{} : cpus[i];
    impl->threads.emplace_back([io = impl->ios[i].get(), set = std::move(set), i] {
      NameThisThread("gw-io-" + std::to_string(i));
      if (!set.empty()) {
        if (Status s = PinCurrentThread(set); !s.ok()) {
          spdlog::warn("gateway: io thread {}: {}; it runs wherever the kernel puts it", i,
                       s.message());
        }
      }
      io->run();
    });
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

std::uint16_t Gateway::admin_port() const { return impl_->admin ? impl_->admin->port() : 0; }
const GatewayConfig& Gateway::config() const { return impl_->config; }
namespace {

// "ip:port" with the bound port in place of the configured one.
std::string Bound(const std::string& address, std::uint16_t port) {
  auto parsed = ParseHostPort(address, "address", {.allow_port_zero = true});
  return parsed.ok() ? parsed->WithPort(port).ToString() : address;
}

}  // namespace

std::string Gateway::RoutingLine() const {
  std::string line = "drover gateway routing";
  for (const ListenerConfig& l : impl_->config.listeners) {
    line += " " + l.name + "=" + Bound(l.address, port(l.name));
    if (l.protocol == Protocol::kTcp) {
      line += " (service " + l.service + ", " + std::string(PolicyName(l.policy)) + ")";
      continue;
    }
    line += " (http";
    for (const RouteConfig& r : l.routes) {
      line += ", " + r.prefix + " -> " + r.service + " " + std::string(PolicyName(r.policy));
    }
    line += ")";
  }
  if (admin_port() != 0) line += "; admin http://" + Bound(impl_->config.admin, admin_port());
  return line;
}

std::string Gateway::MetricsText() const { return MetricsTextOf(*impl_); }
std::string Gateway::SnapshotJson() const { return SnapshotJsonOf(*impl_); }
bool Gateway::Ready() const { return ReadyOf(*impl_); }

std::uint64_t Gateway::active() const {
  std::uint64_t n = 0;
  for (const auto& p : impl_->proxies) n += p->connections().active.load();
  return n;
}

void Gateway::Shutdown() {
  std::call_once(impl_->shutdown_once, [this] {
    Impl& g = *impl_;
    const MonoTime t0 = g.clock.Now();
    if (g.registration) g.registration->Stop();  // out of discovery first
    for (auto& p : g.proxies) p->StopAccepting();
    spdlog::info("gateway: stopped accepting; {} connections open, draining up to {:.1f} s",
                 active(), Seconds(g.config.drain));
    const MonoTime deadline = t0 + g.config.drain;
    while (active() > 0 && g.clock.Now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const std::uint64_t cut = active();
    for (auto& p : g.proxies) p->CloseAll();
    if (g.admin) g.admin->Stop();
    // Let the cut connections unwind, then stop the loop whatever is left.
    const MonoTime unwind = g.clock.Now() + std::chrono::seconds(2);
    while (active() > 0 && g.clock.Now() < unwind) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    g.StopAll();
    for (auto& t : g.threads) t.join();
    for (auto& u : g.upstreams) u.upstream->Stop();
    spdlog::info("gateway: shut down in {:.1f} s ({} connections cut at the deadline)",
                 Seconds(g.clock.Now() - t0), cut);
  });
}

}  // namespace drover::gateway
