// `drover registry`: flags and YAML into registry::DaemonOptions, then the daemon until a signal.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "commands.h"
#include "common/signals.h"
#include "registry/daemon.h"
#include "registry/daemon_config.h"
#include "registry/ui_url.h"

namespace drover::cli {
namespace {

using registry::DaemonOptions;

int RunRegistry(const DaemonOptions& options) {
  // Before any thread starts: every thread inherits the mask, only WaitForSignal gets them.
  const sigset_t signals = BlockShutdownSignals();
  RealClock clock;
  auto daemon = registry::Daemon::Start(options, clock);
  if (!daemon.ok()) {
    spdlog::error("{}", daemon.status().ToString());
    return daemon.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  // The first line on stdout is the bound address, for scripts and tests that pass port 0.
  std::printf("%s\n", (*daemon)->ListeningLine().c_str());
  std::fflush(stdout);
  const int signal_number = WaitForSignal(signals);
  spdlog::info("registry: {} received, shutting down", strsignal(signal_number));
  (*daemon)->Stop();
  return 0;
}

void AddStoreOptions(CLI::App& cmd, DaemonOptions& o) {
  cmd.add_option("--store", o.store,
                 "sqlite: one process, embedded; etcd: any number of registry processes over "
                 "one etcd cluster (high availability)")
      ->check(CLI::IsMember({"sqlite", "etcd"}))
      ->capture_default_str();
  cmd.add_option("--data-dir", o.data_dir, "sqlite: directory for registry.db (created if missing)")
      ->capture_default_str();
  cmd.add_option("--etcd-endpoints", o.etcd_endpoints,
                 "etcd: client addresses of the members, host:port[,host:port...]");
  cmd.add_option("--etcd-prefix", o.etcd_prefix,
                 "etcd: key prefix of this registry (registries sharing it are one registry)")
      ->capture_default_str();
  cmd.add_option("--etcd-session-ttl", o.etcd_session_ttl_s,
                 "etcd: seconds without this process before another takes over lease expiry")
      ->check(CLI::Range(1, 600))
      ->capture_default_str();
  cmd.add_option("--tick-ms", o.tick_ms, "Lease expiry and progress interval in ms")
      ->check(CLI::Range(10, 60'000))
      ->capture_default_str();
  cmd.add_option("--self-preservation", o.self_preservation_fraction,
                 "Freeze expiry when more than this fraction of a service would expire at once")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
}

void AddApiOptions(CLI::App& cmd, DaemonOptions& o) {
  cmd.add_option("--http", o.http, "HTTP listen address host:port (port 0: any free port)")
      ->capture_default_str();
  cmd.add_option("--grpc", o.grpc, "gRPC listen address host:port, or 'off'")
      ->capture_default_str();
  cmd.add_option("--auth-tokens", o.auth_tokens,
                 "YAML file of bearer tokens (name, token, write: [services] or read_only); "
                 "without it the API is open")
      ->check(CLI::ExistingFile);
  cmd.add_option("--tls-cert", o.tls_cert,
                 "PEM certificate chain: serve HTTPS and gRPC over TLS (with --tls-key)")
      ->check(CLI::ExistingFile);
  cmd.add_option("--tls-key", o.tls_key, "PEM private key for --tls-cert")
      ->check(CLI::ExistingFile);
  const auto ui_url = [](const std::string& url) {
    const Status s = registry::ValidateUiUrl(url);
    return s.ok() ? std::string() : s.message();
  };
  cmd.add_option("--ui-gateway", o.ui_gateways,
                 "Dashboard: admin URL of a gateway (http://host:port) the page at /ui/ shows "
                 "besides those registered as drover-gateway (found without flags); the browser "
                 "fetches it directly; repeatable")
      ->check(ui_url);
  cmd.add_option("--ui-agent", o.ui_agents,
                 "Dashboard: URL of a `drover agent` (http://host:port) the page at /ui/ shows "
                 "besides those registered as drover-agent; the browser fetches it directly; "
                 "repeatable")
      ->check(ui_url);
  cmd.add_option("--dns", o.dns,
                 "Answer DNS on UDP and TCP at this ip:port (port 0: any free port): A/AAAA and "
                 "SRV for READY instances as <service>.service.<domain>, SRV also as "
                 "_<service>._tcp.service.<domain>; read-only, no recursion, no tokens (default: "
                 "off)");
  cmd.add_option("--dns-domain", o.dns_domain, "The DNS domain the names end in")
      ->capture_default_str();
  cmd.add_option("--dns-ttl", o.dns_ttl_s, "TTL in seconds of every DNS answer")
      ->check(CLI::Range(0, 86'400))
      ->capture_default_str();
  cmd.add_option("--xds", o.xds,
                 "Serve xDS (ADS, v3) at this ip:port for proxyless gRPC clients (xds:///<service> "
                 "with a bootstrap naming this address): listeners, routes, clusters and endpoints "
                 "of READY/DRAINING instances; read-only, no authentication (default: off)");
  cmd.add_option("--xds-allow", o.xds_allow,
                 "Peers admitted to --xds, as IP ranges (10.0.0.0/8,127.0.0.1); default: every "
                 "peer that can connect");
  cmd.add_option("--xds-max-streams-per-client", o.xds_max_streams_per_client,
                 "xDS streams open at once per client connection; more are RESOURCE_EXHAUSTED")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}))
      ->capture_default_str();
  cmd.add_option("--xds-max-streams", o.xds_max_streams, "xDS streams open at once in all")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}))
      ->capture_default_str();
  cmd.add_option("--fleet-ca", o.fleet_ca,
                 "PEM CAs for gateways and agents registered with scheme https, whose status the "
                 "registry fetches for the dashboard (default: the system's trust store)")
      ->check(CLI::ExistingFile);
}

void AddLimitOptions(CLI::App& cmd, DaemonOptions& o) {
  cmd.add_option("--max-connections", o.max_connections,
                 "HTTP connections open at once; more are answered 503 and closed")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}))
      ->capture_default_str();
  cmd.add_option("--max-watches-per-client", o.max_watches_per_client,
                 "Watch streams (HTTP and gRPC) open at once per client -- per token with "
                 "--auth-tokens, else per connection; more are refused (429, RESOURCE_EXHAUSTED)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}))
      ->capture_default_str();
  cmd.add_option("--max-watches", o.max_watches,
                 "Watch streams open at once over every client; more are refused")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}))
      ->capture_default_str();
  cmd.add_option("--write-rate", o.write_rate,
                 "Writes per second per client (per token, else per connection), beyond which "
                 "429 / RESOURCE_EXHAUSTED (0: no limit)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  cmd.add_option("--write-burst", o.write_burst,
                 "Writes a client may send at once before --write-rate applies (0: twice it)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  cmd.add_option("--total-write-rate", o.total_write_rate,
                 "Writes per second over every client, beyond which 429 / RESOURCE_EXHAUSTED "
                 "(0: no limit)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  cmd.add_option("--max-body", o.max_body, "Largest HTTP request body in bytes; more: 413")
      ->check(CLI::Range(std::size_t{1024}, std::size_t{64} << 20))
      ->capture_default_str();
}

}  // namespace

void AddRegistryCommand(CLI::App& app) {
  auto options = std::make_shared<DaemonOptions>();
  auto config = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "registry",
      "Run the service registry: leases, generations, readiness and watch over HTTP/JSON and "
      "gRPC, stored in SQLite under --data-dir, or in an etcd cluster shared by several registry "
      "processes (--store etcd)");
  AddStoreOptions(*cmd, *options);
  AddApiOptions(*cmd, *options);
  AddLimitOptions(*cmd, *options);
  cmd->add_option("--config", *config,
                  "YAML file with any of these settings (store, data_dir, etcd_endpoints, "
                  "etcd_prefix, etcd_session_ttl, http, grpc, auth_tokens, tick_ms, "
                  "self_preservation, tls_cert, tls_key, ui_gateways, ui_agents, dns, dns_domain, "
                  "dns_ttl, xds, xds_allow, xds_max_streams_per_client, xds_max_streams); flags "
                  "override "
                  "it")
      ->check(CLI::ExistingFile);
  cmd->callback([options, config, cmd] {
    if (!config->empty()) {
      Result<std::string> text = ReadConfigFile(*config);
      const Status s =
          text.ok() ? registry::ApplyDaemonConfig(*text, *config, FlagGivenIn(*cmd), *options)
                    : text.status();
      if (!s.ok()) {
        spdlog::error("{}", s.message());
        throw CLI::RuntimeError(2);
      }
    }
    if (const int code = RunRegistry(*options); code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace drover::cli
