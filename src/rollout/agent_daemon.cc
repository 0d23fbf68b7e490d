#include "rollout/agent_daemon.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <stop_token>
#include <thread>

#include "common/host_port.h"
#include "common/tokens.h"
#include "drover/discovery.h"
#include "drover/host.h"
#include "drover/mutex.h"
#include "rollout/agent_server.h"
#include "rollout/supervisor.h"
#include "sdk/registry_channel.h"
#include "sdk/self_registration.h"

namespace drover::rollout {
namespace {

using namespace std::chrono_literals;

// "agent-127.0.0.2-7080": an id from the advertised address ([A-Za-z0-9._-] only).
std::string DefaultName(const HostPort& advertised) {
  std::string name = "agent-" + advertised.host + "-" + std::to_string(advertised.port);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '-';
  }
  return name;
}

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

}  // namespace

struct AgentDaemon::Impl {
  AgentDaemonOptions options;
  HostPort listen;
  std::string host;  // what "{host}" becomes; the advertised host
  std::shared_ptr<const Authorizer> auth;
  std::unique_ptr<Supervisor> supervisor;
  std::unique_ptr<AgentServer> server;
  std::string advertised;  // host:port, once the port is bound
  std::string name;

  std::unique_ptr<sdk::SelfRegistration> registration;

  Status CheckAccess() {
    if (!options.auth_tokens.empty()) {
      DROVER_ASSIGN_OR_RETURN(auth, Authorizer::LoadFile(options.auth_tokens));
      if (!listen.IsLoopback() && options.tls_cert.empty()) {
        spdlog::warn(
            "agent: tokens travel in clear text on the non-loopback address {}; give --tls-cert "
            "and --tls-key",
            options.listen);
      }
      return Status::Ok();
    }
    if (!listen.IsLoopback() && !options.insecure) {
      return FailedPreconditionError(
          "--listen " + options.listen +
          " is reachable from other machines, and the agent starts whatever command it is sent: "
          "give --auth-tokens FILE (a token with `deploy: [services]` for the deploy "
          "controller), or --insecure to run it open anyway");
    }
    return Status::Ok();
  }

  // The advertised host (for "{host}") before the port is known.
  Status ResolveHost() {
    if (!options.advertise.empty()) {
      DROVER_ASSIGN_OR_RETURN(const HostPort a, ParseHostPort(options.advertise, "--advertise"));
      if (a.IsWildcard()) {
        return InvalidArgumentError("--advertise " + options.advertise +
                                    ": give the address other hosts reach this agent at");
      }
      host = a.host;
      return Status::Ok();
    }
    if (listen.IsWildcard()) {
      if (!options.registry.empty()) {
        return InvalidArgumentError("--listen " + options.listen +
                                    " is every interface: give --advertise HOST:PORT, the "
                                    "address other hosts reach this agent at");
      }
      host = HostName();
      return Status::Ok();
    }
    host = listen.host;
    return Status::Ok();
  }

  HostOptions EntryOptions() const {
    HostOptions o;
    o.registry = options.registry;
    o.registry_ca = options.registry_ca;
    o.token = options.token;
    o.service = kAgentService;
    o.instance_id = name;
    o.zone = options.zone;
    o.labels = options.labels;
    o.labels["host"] = host;
    o.labels["scheme"] = server->tls() ? "https" : "http";
    o.labels["capacity"] = std::to_string(options.capacity);
    if (!options.zone.empty()) o.labels["zone"] = options.zone;
    o.advertise = advertised;
    o.health = "";             // the API's GET /live is the probe
    o.stop_accepting = [] {};  // the API keeps answering until Stop() ends it
    o.drain = [](Duration) {};
    o.propagation_delay = 1s;
    o.drain_deadline = 0s;
    o.grace_period = 5s;
    return o;
  }
};

Result<std::unique_ptr<AgentDaemon>> AgentDaemon::Start(const AgentDaemonOptions& options,
                                                        Clock& clock) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  DROVER_ASSIGN_OR_RETURN(impl->listen,
                          ParseHostPort(options.listen, "--listen", {.allow_port_zero = true}));
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (options.capacity < 0) return InvalidArgumentError("--capacity cannot be negative");
  if (!options.registry.empty()) {
    // A registry address that cannot work is a usage error now, not a retry loop later.
    DROVER_RETURN_IF_ERROR(
        sdk::ParseRegistryTargets(options.registry, options.registry_ca).status());
  }
  DROVER_RETURN_IF_ERROR(impl->CheckAccess());
  DROVER_RETURN_IF_ERROR(impl->ResolveHost());

  SupervisorOptions supervisor;
  supervisor.data_dir = options.data_dir;
  supervisor.host = impl->host;
  supervisor.event_limit = static_cast<std::size_t>(options.event_limit);
  supervisor.max_restarts = options.max_restarts;
  supervisor.restart_window = std::chrono::seconds(options.restart_window_s);
  DROVER_ASSIGN_OR_RETURN(impl->supervisor, Supervisor::Open(supervisor, clock));
  AgentServerOptions api;
  api.data_dir = options.data_dir;
  api.address = options.listen;
  api.auth = impl->auth;
  api.tls_cert_file = options.tls_cert;
  api.tls_key_file = options.tls_key;
  DROVER_ASSIGN_OR_RETURN(impl->server, AgentServer::Start(*impl->supervisor, api));

  HostPort advertised = impl->listen.WithPort(impl->server->port());
  if (!options.advertise.empty()) {
    advertised = ParseHostPort(options.advertise, "--advertise").value();
  } else if (impl->listen.IsWildcard()) {
    advertised.host = impl->host;
    advertised.kind = HostKind::kName;
  }
  impl->advertised = advertised.ToString();
  impl->name = options.name.empty() ? DefaultName(advertised) : options.name;
  if (!options.registry.empty()) {
    // The instances run whether or not discovery knows the agent.
    impl->registration = sdk::SelfRegistration::Start("agent", impl->EntryOptions());
  }
  return std::unique_ptr<AgentDaemon>(new AgentDaemon(std::move(impl)));
}

AgentDaemon::AgentDaemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

AgentDaemon::~AgentDaemon() { Stop(); }

std::string AgentDaemon::ListeningLine() const {
  std::string line = std::string("drover agent listening on ") +
                     (impl_->server && impl_->server->tls() ? "https" : "http") + "://" +
                     impl_->listen.WithPort(port()).ToString() + " (data dir " +
                     impl_->options.data_dir + ")";
  if (!impl_->options.registry.empty()) {
    line += "; registering as " + impl_->name + " at " + impl_->advertised + " with " +
            impl_->options.registry;
  }
  return line;
}

std::uint16_t AgentDaemon::port() const { return impl_->server ? impl_->server->port() : 0; }

bool AgentDaemon::open_to_network() const { return !impl_->auth && !impl_->listen.IsLoopback(); }

void AgentDaemon::Stop() {
  if (impl_->registration) impl_->registration->Stop();  // leaves discovery if registered
  impl_->server.reset();
  impl_->supervisor.reset();
}

}  // namespace drover::rollout
