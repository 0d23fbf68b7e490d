#include "registry/daemon.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/cidr.h"
#include "common/host_port.h"
#include "common/thread_name.h"
#include "common/tokens.h"
#include "registry/client_limits.h"
#include "registry/dns_server.h"
#include "registry/etcd_store.h"
#include "registry/grpc_api.h"
#include "registry/http_api.h"
#include "registry/registry.h"
#include "registry/sqlite_store.h"
#include "registry/xds_server.h"

namespace drover::registry {

struct Daemon::Impl {
  DaemonOptions options;
  Clock* clock = nullptr;
  std::string where;  // "data dir ..." or "etcd ... prefix ..."
  HostPort http_address;
  std::unique_ptr<Registry> registry;
  std::unique_ptr<HttpServer> http;
  std::unique_ptr<GrpcServer> grpc;
  std::unique_ptr<DnsServer> dns;
  std::unique_ptr<XdsServer> xds;
  std::jthread ticker;
  std::once_flag stop_once;
};

namespace {

// What can be told wrong before anything is opened.
Status CheckOptions(const DaemonOptions& o) {
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (o.store == "etcd" && o.etcd_endpoints.empty()) {
    return InvalidArgumentError("--store etcd needs --etcd-endpoints host:port[,host:port...]");
  }
  if (o.store != "etcd" && o.store != "sqlite") {
    return InvalidArgumentError("--store must be sqlite or etcd, got '" + o.store + "'");
  }
  if (!o.dns.empty()) {
    DROVER_RETURN_IF_ERROR(
        ParseHostPort(o.dns, "--dns", {.allow_port_zero = true, .require_ip = true}).status());
    DROVER_RETURN_IF_ERROR(ValidateDnsZone({.domain = o.dns_domain, .ttl_s = o.dns_ttl_s}));
  }
  if (!o.xds.empty()) {
    DROVER_RETURN_IF_ERROR(
        ParseHostPort(o.xds, "--xds", {.allow_port_zero = true, .require_ip = true}).status());
  }
  DROVER_RETURN_IF_ERROR(ParseCidrList(o.xds_allow, "--xds-allow").status());
  if (o.xds_max_streams_per_client < 1) {
    return InvalidArgumentError("--xds-max-streams-per-client must be >= 1");
  }
  if (o.xds_max_streams < 1) return InvalidArgumentError("--xds-max-streams must be >= 1");
  return Status::Ok();
}

Result<std::shared_ptr<const Authorizer>> LoadAuth(const DaemonOptions& o) {
  if (o.auth_tokens.empty()) return std::shared_ptr<const Authorizer>();
  DROVER_ASSIGN_OR_RETURN(std::shared_ptr<const Authorizer> auth,
                          Authorizer::LoadFile(o.auth_tokens));
  spdlog::info("registry: bearer-token auth on, {} tokens from {}", auth->size(), o.auth_tokens);
  return auth;
}

// The store, and where it keeps its data (for the listening line).
Result<std::unique_ptr<Store>> OpenStore(const DaemonOptions& o, std::string& where) {
  if (o.store == "etcd") {
    EtcdOptions eo;
    std::stringstream list(o.etcd_endpoints);
    for (std::string endpoint; std::getline(list, endpoint, ',');) {
      if (!endpoint.empty()) eo.endpoints.push_back(endpoint);
    }
    eo.prefix = o.etcd_prefix;
    eo.session_ttl = std::chrono::seconds(o.etcd_session_ttl_s);
    DROVER_ASSIGN_OR_RETURN(std::unique_ptr<EtcdStore> store, EtcdStore::Open(eo));
    where = "etcd " + o.etcd_endpoints + " prefix " + o.etcd_prefix;
    return std::unique_ptr<Store>(std::move(store));
  }
  std::error_code ec;
  std::filesystem::create_directories(o.data_dir, ec);
  if (ec) {
    return UnavailableError("cannot create data directory " + o.data_dir + ": " + ec.message());
  }
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<SqliteStore> store, SqliteStore::Open(o.data_dir));
  where = "data dir " + o.data_dir;
  return std::unique_ptr<Store>(std::move(store));
}

HttpOptions HttpOptionsOf(const DaemonOptions& o, const HostPort& address,
                          std::shared_ptr<const Authorizer> auth,
                          std::shared_ptr<ClientLimits> limits,
                          std::shared_ptr<const DnsCounters> dns,
                          std::shared_ptr<const XdsCounters> xds) {
  HttpOptions http;
  http.address = address.ToString();
  http.tls_cert_file = o.tls_cert;
  http.tls_key_file = o.tls_key;
  http.ui_gateways = o.ui_gateways;
  http.ui_agents = o.ui_agents;
  http.fleet_ca = o.fleet_ca;
  http.max_connections = o.max_connections;
  http.max_body = o.max_body;
  http.limits = std::move(limits);
  http.auth = std::move(auth);
  http.dns = std::move(dns);
  http.xds = std::move(xds);
  return http;
}

// Logs what an operator should know about who can reach the APIs.
void WarnAboutExposure(const DaemonOptions& o, const HostPort& http, bool auth) {
  const bool tls = !o.tls_cert.empty();
  bool grpc_loopback = true;
  if (o.grpc != "off") {
    auto grpc = ParseHostPort(o.grpc, "--grpc", {.allow_port_zero = true});
    grpc_loopback = grpc.ok() && grpc->IsLoopback();
    if (!grpc_loopback && !auth) {
      spdlog::warn("registry: gRPC API on non-loopback address {} WITHOUT authentication",
                   grpc.ok() ? grpc->host : o.grpc);
    }
  }
  if (!o.dns.empty()) {
    auto dns = ParseHostPort(o.dns, "--dns", {.allow_port_zero = true});
    if (dns.ok() && !dns->IsLoopback()) {
      spdlog::warn(
          "registry: DNS on non-loopback address {}: it answers anyone who can reach it (no "
          "tokens in DNS) with the READY instances' addresses",
          dns->host);
    }
  }
  if (!o.xds.empty()) {
    auto xds = ParseHostPort(o.xds, "--xds", {.allow_port_zero = true});
    if (xds.ok() && !xds->IsLoopback() && o.xds_allow.empty()) {
      spdlog::warn(
          "registry: xDS on non-loopback address {} without --xds-allow: any client that reaches "
          "it reads every service's endpoints (xDS has no authentication)",
          xds->host);
    }
  }
  if (!http.IsLoopback() && !auth) {
    spdlog::warn(
        "registry: HTTP API on non-loopback address {} WITHOUT authentication: anyone who can "
        "reach it can register and deregister instances",
        http.host);
  }
  if (auth && !tls && (!http.IsLoopback() || !grpc_loopback)) {
    spdlog::warn(
        "registry: tokens travel in clear text on a non-loopback address; give "
        "--tls-cert and --tls-key");
  }
}

Status StartApis(Daemon::Impl& d) {
  const DaemonOptions& o = d.options;
  DROVER_ASSIGN_OR_RETURN(std::shared_ptr<const Authorizer> auth, LoadAuth(o));
  // One set of per-client limits for both APIs: a client's HTTP and gRPC calls count together.
  auto limits = std::make_shared<ClientLimits>(
      ClientLimitOptions{.max_watches_per_client = o.max_watches_per_client,
                         .max_watches = o.max_watches,
                         .write_rate = o.write_rate,
                         .write_burst = o.write_burst,
                         .total_write_rate = o.total_write_rate});
  auto dns_counters = o.dns.empty() ? nullptr : std::make_shared<DnsCounters>();
  auto xds_counters = o.xds.empty() ? nullptr : std::make_shared<XdsCounters>();
  DROVER_ASSIGN_OR_RETURN(
      d.http, HttpServer::Start(*d.registry, HttpOptionsOf(o, d.http_address, auth, limits,
                                                           dns_counters, xds_counters)));
  if (o.grpc != "off") {
    GrpcOptions grpc;
    grpc.address = o.grpc;
    grpc.auth = auth;
    grpc.limits = limits;
    grpc.tls_cert_file = o.tls_cert;
    grpc.tls_key_file = o.tls_key;
    DROVER_ASSIGN_OR_RETURN(d.grpc, GrpcServer::Start(*d.registry, grpc));
  }
  if (!o.dns.empty()) {
    DnsOptions dns;
    dns.address = o.dns;
    dns.zone = {.domain = o.dns_domain, .ttl_s = o.dns_ttl_s};
    dns.counters = dns_counters;
    DROVER_ASSIGN_OR_RETURN(d.dns, DnsServer::Start(*d.registry, std::move(dns), *d.clock));
  }
  if (!o.xds.empty()) {
    XdsOptions xds;
    xds.address = o.xds;
    DROVER_ASSIGN_OR_RETURN(xds.allow, ParseCidrList(o.xds_allow, "--xds-allow"));
    xds.max_streams_per_client = o.xds_max_streams_per_client;
    xds.max_streams = o.xds_max_streams;
    xds.counters = xds_counters;
    DROVER_ASSIGN_OR_RETURN(d.xds, XdsServer::Start(*d.registry, std::move(xds)));
  }
  WarnAboutExposure(o, d.http_address, auth != nullptr);
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Daemon>> Daemon::Start(const DaemonOptions& options, Clock& clock) {
  DROVER_RETURN_IF_ERROR(CheckOptions(options));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->clock = &clock;
  DROVER_ASSIGN_OR_RETURN(impl->http_address,
                          ParseHostPort(options.http, "--http", {.allow_port_zero = true}));
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(options, impl->where));
  RegistryOptions ro;
  ro.self_preservation_fraction = options.self_preservation_fraction;
  DROVER_ASSIGN_OR_RETURN(impl->registry, Registry::Open(std::move(store), clock, ro));
  DROVER_RETURN_IF_ERROR(StartApis(*impl));
  const bool tls = !options.tls_cert.empty();
  spdlog::info(
      "registry: serving {} on {}; dashboard at {}://{}/ui/ (registered gateways and agents, and "
      "{} gateway(s), {} agent(s) named by flags)",
      tls ? "HTTPS" : "HTTP", impl->http_address.WithPort(impl->http->port()).ToString(),
      tls ? "https" : "http", impl->http_address.WithPort(impl->http->port()).ToString(),
      options.ui_gateways.size(), options.ui_agents.size());
  impl->ticker =
      std::jthread([&clock, registry = impl->registry.get(),
                    tick = std::chrono::milliseconds(options.tick_ms)](std::stop_token stop) {
        NameThisThread("reg-ticker");
        while (clock.SleepFor(tick, stop)) {
          if (Status s = registry->Tick(); !s.ok())
            spdlog::error("registry tick: {}", s.ToString());
        }
      });
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Daemon::~Daemon() { Stop(); }

std::uint16_t Daemon::http_port() const { return impl_->http->port(); }

int Daemon::grpc_port() const { return impl_->grpc ? impl_->grpc->port() : 0; }

int Daemon::dns_port() const { return impl_->dns ? impl_->dns->port() : 0; }

int Daemon::xds_port() const { return impl_->xds ? impl_->xds->port() : 0; }

std::string Daemon::ListeningLine() const {
  const DaemonOptions& o = impl_->options;
  const bool tls = !o.tls_cert.empty();
  std::string grpc_note;
  if (impl_->grpc) {
    auto grpc = ParseHostPort(o.grpc, "--grpc", {.allow_port_zero = true});
    const std::string bound =
        grpc.ok() ? grpc->WithPort(static_cast<std::uint16_t>(grpc_port())).ToString() : o.grpc;
    grpc_note = std::string(" and ") + (tls ? "grpcs://" : "grpc://") + bound;
  }
  if (impl_->dns) {
    auto dns = ParseHostPort(o.dns, "--dns", {.allow_port_zero = true});
    grpc_note += " and dns://" + (dns.ok() ? dns->WithPort(impl_->dns->port()).ToString() : o.dns);
  }
  if (impl_->xds) {
    auto xds = ParseHostPort(o.xds, "--xds", {.allow_port_zero = true});
    grpc_note +=
        " and xds://" +
        (xds.ok() ? xds->WithPort(static_cast<std::uint16_t>(impl_->xds->port())).ToString()
                  : o.xds);
  }
  return std::string("drover registry listening on ") + (tls ? "https" : "http") + "://" +
         impl_->http_address.WithPort(http_port()).ToString() + grpc_note + " (" + impl_->where +
         ")";
}

void Daemon::Stop() {
  std::call_once(impl_->stop_once, [this] {
    if (impl_->ticker.joinable()) {
      impl_->ticker.request_stop();
      impl_->ticker.join();
    }
    if (impl_->xds) impl_->xds->Stop();
    if (impl_->dns) impl_->dns->Stop();
    if (impl_->grpc) impl_->grpc->Stop();
    if (impl_->http) impl_->http->Stop();
  });
}

}  // namespace drover::registry
