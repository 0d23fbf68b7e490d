// `drover registry`: the discovery daemon, on the embedded SQLite store or on an etcd cluster.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "config_files.h"
#include "registry/auth.h"
#include "registry/client_limits.h"
#include "registry/etcd_store.h"
#include "registry/grpc_api.h"
#include "registry/http_api.h"
#include "registry/registry.h"
#include "registry/sqlite_store.h"
#include "registry/ui_url.h"

namespace drover::cli {
namespace {

// "host:port" (IPv6 as "[::1]:port").
bool SplitHostPort(const std::string& text, std::string* host, std::uint16_t* port) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string h = text.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  try {
    const int p = std::stoi(text.substr(colon + 1));
    if (p < 0 || p > 65535) return false;
    *port = static_cast<std::uint16_t>(p);
  } catch (...) {
    return false;
  }
  *host = h;
  return true;
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

int RunRegistry(const RegistryArgs& args) {
  if (args.tls_cert.empty() != args.tls_key.empty()) {
    spdlog::error("--tls-cert and --tls-key go together");
    return 2;
  }
  registry::HttpOptions http;
  http.tls_cert_file = args.tls_cert;
  http.tls_key_file = args.tls_key;
  http.ui_gateways = args.ui_gateways;
  http.ui_agents = args.ui_agents;
  http.max_connections = args.max_connections;
  // One set of per-client limits for both APIs: a client's HTTP and gRPC calls count together.
  http.limits = std::make_shared<registry::ClientLimits>(
      registry::ClientLimitOptions{.max_watches_per_client = args.max_watches_per_client,
                                   .write_rate = args.write_rate,
                                   .write_burst = args.write_burst});
  http.max_body = args.max_body;
  if (!SplitHostPort(args.http, &http.address, &http.port)) {
    spdlog::error("--http must be host:port, got '{}'", args.http);
    return 2;
  }
  if (!args.auth_tokens.empty()) {
    auto auth = registry::Authorizer::LoadFile(args.auth_tokens);
    if (!auth.ok()) {
      spdlog::error("{}", auth.status().ToString());
      return 2;
    }
    spdlog::info("registry: bearer-token auth on, {} tokens from {}", (*auth)->size(),
                 args.auth_tokens);
    http.auth = *auth;
  }
  const bool etcd = args.store == "etcd";
  if (etcd && args.etcd_endpoints.empty()) {
    spdlog::error("--store etcd needs --etcd-endpoints host:port[,host:port...]");
    return 2;
  }
  if (!etcd) {
    std::error_code ec;
    std::filesystem::create_directories(args.data_dir, ec);
    if (ec) {
      spdlog::error("cannot create data directory {}: {}", args.data_dir, ec.message());
      return 1;
    }
  }
  // Block the shutdown signals before any thread starts, so that every thread inherits the mask
  // and only sigwait below receives them.
  const sigset_t signals = BlockShutdownSignals();

  std::unique_ptr<registry::Store> store;
  std::string where;
  if (etcd) {
    registry::EtcdOptions eo;
    std::stringstream list(args.etcd_endpoints);
    for (std::string endpoint; std::getline(list, endpoint, ',');) {
      if (!endpoint.empty()) eo.endpoints.push_back(endpoint);
    }
    eo.prefix = args.etcd_prefix;
    eo.session_ttl = std::chrono::seconds(args.etcd_session_ttl_s);
    auto opened = registry::EtcdStore::Open(eo);
    if (!opened.ok()) {
      spdlog::error("{}", opened.status().ToString());
      return 1;
    }
    store = std::move(*opened);
    where = "etcd " + args.etcd_endpoints + " prefix " + args.etcd_prefix;
  } else {
    auto opened = registry::SqliteStore::Open(args.data_dir);
    if (!opened.ok()) {
      spdlog::error("{}", opened.status().ToString());
      return 1;
    }
    store = std::move(*opened);
    where = "data dir " + args.data_dir;
  }
  RealClock clock;
  registry::RegistryOptions options;
  options.self_preservation_fraction = args.self_preservation_fraction;
  auto reg = registry::Registry::Open(std::move(store), clock, options);
  if (!reg.ok()) {
    spdlog::error("{}", reg.status().ToString());
    return 1;
  }
  auto server = registry::HttpServer::Start(**reg, http);
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    return 1;
  }
  registry::GrpcOptions grpc_options;
  grpc_options.address = args.grpc;
  grpc_options.auth = http.auth;
  grpc_options.limits = http.limits;
  grpc_options.tls_cert_file = args.tls_cert;
  grpc_options.tls_key_file = args.tls_key;
  const bool tls = !args.tls_cert.empty();
  std::unique_ptr<registry::GrpcServer> grpc_server;
  std::string grpc_note;
  if (args.grpc != "off") {
    auto started = registry::GrpcServer::Start(**reg, grpc_options);
    if (!started.ok()) {
      spdlog::error("{}", started.status().ToString());
      return 1;
    }
    grpc_server = std::move(started).value();
    const std::string grpc_host = args.grpc.substr(0, args.grpc.rfind(':'));
    grpc_note = std::string(" and ") + (tls ? "grpcs://" : "grpc://") + grpc_host + ":" +
                std::to_string(grpc_server->port());
    if (!IsLoopback(grpc_host) && !http.auth) {
      spdlog::warn("registry: gRPC API on non-loopback address {} WITHOUT authentication",
                   grpc_host);
    }
  }
  if (!IsLoopback(http.address) && !http.auth) {
    spdlog::warn(
        "registry: HTTP API on non-loopback address {} WITHOUT authentication: anyone who can "
        "reach it can register and deregister instances",
        http.address);
  }
  if (http.auth && !tls && (!IsLoopback(http.address) || !IsLoopback(args.grpc))) {
    spdlog::warn(
        "registry: tokens travel in clear text on a non-loopback address; give "
        "--tls-cert and --tls-key");
  }
  // The first line on stdout is the bound address, for scripts and tests that pass port 0.
  std::printf("drover registry listening on %s://%s:%u%s (%s)\n", tls ? "https" : "http",
              http.address.c_str(), static_cast<unsigned>((*server)->port()), grpc_note.c_str(),
              where.c_str());
  std::fflush(stdout);
  spdlog::info(
      "registry: serving {} on {}:{}; dashboard at {}://{}:{}/ui/ ({} gateway(s), {} "
      "agent(s))",
      tls ? "HTTPS" : "HTTP", http.address, (*server)->port(), tls ? "https" : "http", http.address,
      (*server)->port(), http.ui_gateways.size(), http.ui_agents.size());

  std::jthread ticker([&clock, registry = reg->get(),
                       tick = std::chrono::milliseconds(args.tick_ms)](std::stop_token stop) {
    while (clock.SleepFor(tick, stop)) {
      if (Status s = registry->Tick(); !s.ok()) spdlog::error("registry tick: {}", s.ToString());
    }
  });

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("registry: {} received, shutting down", strsignal(signal_number));
  ticker.request_stop();
  ticker.join();
  if (grpc_server) grpc_server->Stop();
  (*server)->Stop();
  return 0;
}

}  // namespace

void AddRegistryCommand(CLI::App& app) {
  auto args = std::make_shared<RegistryArgs>();
  CLI::App* cmd = app.add_subcommand(
      "registry",
      "Run the service registry: leases, generations, readiness and watch over HTTP/JSON and "
      "gRPC, stored in SQLite under --data-dir, or in an etcd cluster shared by several registry "
      "processes (--store etcd)");
  cmd->add_option("--store", args->store,
                  "sqlite: one process, embedded; etcd: any number of registry processes over "
                  "one etcd cluster (high availability)")
      ->check(CLI::IsMember({"sqlite", "etcd"}))
      ->capture_default_str();
  cmd->add_option("--data-dir", args->data_dir,
                  "sqlite: directory for registry.db (created if missing)")
      ->capture_default_str();
  cmd->add_option("--etcd-endpoints", args->etcd_endpoints,
                  "etcd: client addresses of the members, host:port[,host:port...]");
  cmd->add_option("--etcd-prefix", args->etcd_prefix,
                  "etcd: key prefix of this registry (registries sharing it are one registry)")
      ->capture_default_str();
  cmd->add_option("--etcd-session-ttl", args->etcd_session_ttl_s,
                  "etcd: seconds without this process before another takes over lease expiry")
      ->check(CLI::Range(1, 600))
      ->capture_default_str();
  cmd->add_option("--http", args->http, "HTTP listen address host:port (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--grpc", args->grpc, "gRPC listen address host:port, or 'off'")
      ->capture_default_str();
  cmd->add_option("--auth-tokens", args->auth_tokens,
                  "YAML file of bearer tokens (name, token, write: [services] or read_only); "
                  "without it the API is open")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tick-ms", args->tick_ms, "Lease expiry and progress interval in ms")
      ->check(CLI::Range(10, 60'000))
      ->capture_default_str();
  cmd->add_option("--self-preservation", args->self_preservation_fraction,
                  "Freeze expiry when more than this fraction of a service would expire at once")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--max-connections", args->max_connections,
                  "HTTP connections open at once; more are answered 503 and closed")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}))
      ->capture_default_str();
  cmd->add_option("--max-watches-per-client", args->max_watches_per_client,
                  "HTTP watch streams open at once per client address; more get 429")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}))
      ->capture_default_str();
  cmd->add_option("--write-rate", args->write_rate,
                  "HTTP writes per second per client address, beyond which 429 (0: no limit; "
                  "clients behind one NAT address share it)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  cmd->add_option("--write-burst", args->write_burst,
                  "Writes a client may send at once before --write-rate applies (0: twice it)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  cmd->add_option("--max-body", args->max_body, "Largest HTTP request body in bytes; more: 413")
      ->check(CLI::Range(std::size_t{1024}, std::size_t{64} << 20))
      ->capture_default_str();
  cmd->add_option("--tls-cert", args->tls_cert,
                  "PEM certificate chain: serve HTTPS and gRPC over TLS (with --tls-key)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tls-key", args->tls_key, "PEM private key for --tls-cert")
      ->check(CLI::ExistingFile);
  const auto ui_url = [](const std::string& url) {
    const Status s = registry::ValidateUiUrl(url);
    return s.ok() ? std::string() : s.message();
  };
  cmd->add_option("--ui-gateway", args->ui_gateways,
                  "Dashboard: admin URL of a gateway (http://host:port) whose routing, weights "
                  "and connections the page at /ui/ shows; repeatable")
      ->check(ui_url);
  cmd->add_option("--ui-agent", args->ui_agents,
                  "Dashboard: URL of a `drover agent` (http://host:port) whose deploy history the "
                  "page at /ui/ shows; repeatable")
      ->check(ui_url);
  cmd->add_option("--config", args->config,
                  "YAML file with any of these settings (store, data_dir, etcd_endpoints, "
                  "etcd_prefix, etcd_session_ttl, http, grpc, auth_tokens, tick_ms, "
                  "self_preservation, tls_cert, tls_key, ui_gateways, ui_agents); flags override "
                  "it")
      ->check(CLI::ExistingFile);
  cmd->callback([args, cmd] {
    if (!args->config.empty()) {
      const auto given = [cmd](std::string_view flag) {
        const CLI::Option* option = cmd->get_option_no_throw(std::string(flag));
        return option != nullptr && option->count() > 0;
      };
      Result<std::string> text = ReadConfigFile(args->config);
      Status s = text.ok() ? ApplyRegistryConfig(*text, args->config, given, *args) : text.status();
      if (!s.ok()) {
        spdlog::error("{}", s.message());
        throw CLI::RuntimeError(2);
      }
    }
    const int code = RunRegistry(*args);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace drover::cli
