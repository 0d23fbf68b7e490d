// Daemon: the `drover registry` process in one object -- the store (SQLite under a data dir, or
// an etcd cluster shared with other registry processes), the Registry over it, its HTTP and gRPC
// APIs sharing one set of per-client limits and one token file, and the tick that expires leases
// and sends watch progress. The CLI parses flags and YAML into DaemonOptions, starts a Daemon,
// prints its listening line and waits for a signal; tests can run one in process the same way.
//
// Thread-safety: Start() and the getters from any thread; Stop() is idempotent and must not be
// called from a thread of the daemon's own (an API handler). The Clock must outlive the Daemon.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover::registry {

// Every setting of `drover registry`; the YAML keys (daemon_config.h) and the long flags have
// these names, with '-' for '_'.
struct DaemonOptions {
  std::string store = "sqlite";  // sqlite | etcd
  std::string data_dir = "drover-data";
  std::string etcd_endpoints;  // etcd: host:port,host:port,...
  std::string etcd_prefix = "/drover/registry";
  int etcd_session_ttl_s = 5;
  std::string http = "127.0.0.1:7070";
  std::string grpc = "127.0.0.1:7071";  // "off": no gRPC API
  std::string auth_tokens;              // token file; empty: no authentication
  int tick_ms = 500;
  double self_preservation_fraction = 0.5;
  std::string tls_cert;  // both set: HTTPS and gRPC over TLS
  std::string tls_key;
  // Protection: 0 connections or watches would refuse everything, so >= 1.
  std::size_t max_connections = 4096;
  // Per client: per token with --auth-tokens, else per connection (see ClientLimits).
  std::size_t max_watches_per_client = 1024;
  std::size_t max_watches = 10'000;  // over every client
  double write_rate = 0;             // writes/s per client; 0: no limit
  double write_burst = 0;
  double total_write_rate = 0;  // writes/s over every client; 0: no limit
  std::size_t max_body = 64 * 1024;
  std::vector<std::string> ui_gateways;  // the dashboard's gateway and agent panels
  std::vector<std::string> ui_agents;
  std::string fleet_ca;  // see HttpOptions::fleet_ca
  // DNS (dns_server.h): "host:port" on UDP and TCP, empty: no DNS; names under
  // service.<dns_domain>, answered with this TTL.
  std::string dns;
  std::string dns_domain = "drover";
  std::uint32_t dns_ttl_s = 1;
  // xDS (xds_server.h): "host:port" for proxyless gRPC clients, empty: off; peers admitted
  // (CIDRs, comma-separated; empty: all), and the streams allowed per client connection and in all.
  std::string xds;
  std::string xds_allow;
  std::size_t xds_max_streams_per_client = 8;
  std::size_t xds_max_streams = 10'000;
};

class Daemon {
 public:
  // Checks the options, opens the store and the registry, starts both APIs and the tick, and
  // warns in the log about an API open to the network without tokens or with tokens in clear
  // text. INVALID_ARGUMENT for options that cannot work (a usage error); any other code when
  // the daemon could not start.
  static Result<std::unique_ptr<Daemon>> Start(const DaemonOptions& options, Clock& clock);
  ~Daemon();  // Stop()
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  std::uint16_t http_port() const;
  int grpc_port() const;  // 0 with --grpc off
  int dns_port() const;   // 0 without --dns
  int xds_port() const;   // 0 without --xds
  // "drover registry listening on http://127.0.0.1:7070 and grpc://127.0.0.1:7071 [and
  // dns://127.0.0.1:8600] (data dir ...)": the bound ports, for scripts and tests that pass
  // port 0.
  std::string ListeningLine() const;

  // Stops the tick, then xDS, DNS, the gRPC and HTTP APIs, then closes the store. Idempotent.
  void Stop();

  struct Impl;

 private:
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::registry
