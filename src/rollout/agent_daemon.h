// AgentDaemon: the `drover agent` process in one object -- the Supervisor (this host's instances),
// its HTTP API (AgentServer, with the token file and TLS), and, with a registry, the agent's own
// entry in discovery: service `drover-agent`, so that a deploy controller finds the hosts it can
// place instances on.
//
//   registered as   service "drover-agent", id `name`, address `advertise` (host:port)
//   labels          host (the advertised host), scheme (http | https), capacity (instances it
//                   accepts; 0: no limit), plus any given; zone as the entry's zone and a label
//
// The entry is an SDK ServerHost without a listener of its own (the API is the listener): it is
// registered once the API serves, heartbeats with the registry's lease, and leaves discovery
// first on Stop() (DRAINING, deregister, a short propagation delay), before the API stops and the
// instances are stopped.
//
// Access: without a token file the API must be on loopback, unless `insecure` (start() refuses
// otherwise; with `insecure` the caller should warn, see open_to_network()).
//
// Thread-safety: Start() once; Stop() is idempotent, not from an API handler; getters from any
// thread. The Clock must outlive the daemon.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover::rollout {

struct AgentDaemonOptions {
  std::string data_dir = "drover-agent";
  std::string listen = "127.0.0.1:7080";
  int event_limit = 5;
  int max_restarts = 5;
  int restart_window_s = 60;
  std::string auth_tokens;  // token file; empty: no authentication
  std::string tls_cert;     // both set: HTTPS only
  std::string tls_key;
  bool insecure = false;  // a non-loopback listen address without tokens

  // Discovery of the agent itself; all optional without `registry`.
  std::string registry;     // the registry's gRPC address (host:port, grpc://, grpcs://)
  std::string registry_ca;  // PEM CA for grpcs://
  std::string token;        // bearer token that may write service drover-agent
  // host:port other hosts reach the API at, and what "{host}" becomes for this host's instances.
  // Default: the listen address with its bound port (required when listening on 0.0.0.0).
  std::string advertise;
  std::string name;  // the agent's id in discovery; default "agent-<host>-<port>" (advertised)
  std::string zone;
  int capacity = 0;  // instances it accepts; 0: no limit (a label for placement)
  std::map<std::string, std::string> labels;
};

class AgentDaemon {
 public:
  // Checks the options (INVALID_ARGUMENT: a usage error; FAILED_PRECONDITION: an open API without
  // --insecure), opens the supervisor, starts the API, then registers with the registry when one
  // is given (UNAVAILABLE if it cannot within 30 s).
  static Result<std::unique_ptr<AgentDaemon>> Start(const AgentDaemonOptions& options,
                                                    Clock& clock);
  ~AgentDaemon();  // Stop()
  AgentDaemon(const AgentDaemon&) = delete;
  AgentDaemon& operator=(const AgentDaemon&) = delete;

  // "drover agent listening on https://127.0.0.2:7080 (data dir ...)", with "; registered as
  // <name> at <registry>" when it is.
  std::string ListeningLine() const;
  std::uint16_t port() const;
  // No tokens on an address other machines can reach (allowed by `insecure`): warn about it.
  bool open_to_network() const;

  // Leaves discovery, stops the API, then stops the instances (they come back with the agent).
  void Stop();

  struct Impl;

 private:
  explicit AgentDaemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::rollout
