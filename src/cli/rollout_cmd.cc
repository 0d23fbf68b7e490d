// `drover agent` (the local platform: a process supervisor with an HTTP API) and `drover deploy`
// (the deploy controller: surge rollout, health gate, rollback), RO-1..RO-4.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>

#include "commands.h"
#include "common/signals.h"
#include "drover/cli.h"
#include "net/http_client.h"
#include "rollout/agent_client.h"
#include "rollout/agent_daemon.h"
#include "rollout/deploy_request.h"
#include "rollout/deploy_summary.h"

namespace drover::cli {
namespace {

[[noreturn]] void Fail(int code, const std::string& message) {
  std::cerr << "drover: " << message << "\n";
  throw CLI::RuntimeError(code);
}

// `peer` is "agent" or "registry", for error messages. `timeout` bounds a whole exchange.
// `ca_file`: the CA an https:// peer's certificate is checked against (default: the system's).
net::HttpClient Connect(const std::string& url, const std::string& peer,
                        std::chrono::seconds timeout, const std::string& ca_file = {}) {
  std::string token;
  if (const char* env = std::getenv("DROVER_TOKEN")) token = env;
  auto client = net::HttpClient::Create(url, token, timeout, ca_file, peer);
  if (!client.ok()) Fail(2, "--" + peer + ": " + client.status().message());
  return std::move(client).value();
}

// --- drover agent ----------------------------------------------------------------------------

void WarnInsecure(const std::string& listen) {
  spdlog::warn(
      "agent: INSECURE: the API on {} has no authentication; anyone who can reach it can run "
      "any command on this host as this user (--insecure)",
      listen);
}

int RunAgent(rollout::AgentDaemonOptions args) {
  if (args.token.empty()) {
    if (const char* env = std::getenv("DROVER_TOKEN")) args.token = env;
  }
  const sigset_t signals = BlockShutdownSignals();
  RealClock clock;
  auto agent = rollout::AgentDaemon::Start(args, clock);
  if (!agent.ok()) {
    spdlog::error("agent: {}", agent.status().message());
    const StatusCode code = agent.status().code();
    return code == StatusCode::kInvalidArgument || code == StatusCode::kFailedPrecondition ? 2 : 1;
  }
  std::printf("%s\n", (*agent)->ListeningLine().c_str());
  std::fflush(stdout);
  // The agent starts any argv it is sent: open to the network, it says so now and every 10 min.
  const bool open = (*agent)->open_to_network();
  if (open) WarnInsecure(args.listen);
  int signal_number = 0;
  while (signal_number == 0) {
    signal_number =
        open ? WaitForSignal(signals, std::chrono::minutes(10)) : WaitForSignal(signals);
    if (signal_number == 0) WarnInsecure(args.listen);
  }
  spdlog::info(
      "agent: {} received; leaving discovery, stopping the instances (they restart with the "
      "agent)",
      strsignal(signal_number));
  agent->reset();
  return 0;
}

void AddAgentCommand(CLI::App& app) {
  auto args = std::make_shared<rollout::AgentDaemonOptions>();
  auto labels = std::make_shared<std::vector<std::string>>();
  CLI::App* a = app.add_subcommand(
      "agent",
      "Run the local platform: start, supervise and stop service instances as child processes "
      "(restart with back-off, give up on crash loops, bounded event lists), with an HTTP API "
      "for `drover deploy`");
  a->add_option("--data-dir", args->data_dir,
                "Directory for instance logs, the desired instances and the deploy history")
      ->capture_default_str();
  a->add_option("--listen", args->listen, "HTTP API address host:port (port 0: any free port)")
      ->capture_default_str();
  a->add_option("--auth-tokens", args->auth_tokens,
                "Token file (the registry's format): every /v1 call needs a token, and starting "
                "or stopping instances of a service one whose `deploy:` list names it")
      ->check(CLI::ExistingFile);
  a->add_option("--tls-cert", args->tls_cert, "PEM certificate chain: HTTPS only")
      ->check(CLI::ExistingFile);
  a->add_option("--tls-key", args->tls_key, "PEM private key for --tls-cert")
      ->check(CLI::ExistingFile);
  a->add_flag("--insecure", args->insecure,
              "Allow a non-loopback --listen without --auth-tokens (anyone who reaches it can run "
              "commands on this host; logged loudly)");
  a->add_option(
      "--registry", args->registry,
      "The registry's gRPC address (host:port, grpc://, grpcs://; several of one cluster "
      "comma-separated): the agent registers there as service drover-agent, where `drover "
      "deploy --agents` finds it");
  a->add_option("--registry-ca", args->registry_ca, "CA certificate (PEM) for a grpcs:// registry")
      ->check(CLI::ExistingFile);
  a->add_option("--token", args->token,
                "Bearer token for the registry (write on drover-agent; default $DROVER_TOKEN)");
  a->add_option("--advertise", args->advertise,
                "host:port other hosts reach this agent at; also what {host} becomes for its "
                "instances (default: the --listen address)");
  a->add_option("--name", args->name,
                "The agent's id in discovery (default agent-<host>-<port> of --advertise)");
  a->add_option("--zone", args->zone, "Zone of this host (placement spreads over zones)");
  a->add_option("--capacity", args->capacity, "Instances this host accepts; 0: no limit")
      ->check(CLI::Range(0, 100'000))
      ->capture_default_str();
  a->add_option("--label", *labels, "KEY=VALUE for the agent's discovery entry (repeatable)");
  a->add_option("--event-limit", args->event_limit, "Events kept per instance")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  a->add_option("--max-restarts", args->max_restarts,
                "Restarts allowed within --restart-window; one more crash and the agent gives "
                "up on the instance")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  a->add_option("--restart-window", args->restart_window_s, "Seconds")
      ->check(CLI::Range(1, 86'400))
      ->capture_default_str();
  a->callback([args, labels] {
    for (const std::string& kv : *labels) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) Fail(2, "--label wants KEY=VALUE, got '" + kv + "'");
      args->labels[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    if (const int code = RunAgent(*args); code != 0) throw CLI::RuntimeError(code);
  });
}

// --- drover deploy ---------------------------------------------------------------------------

void PrintOutcome(const rollout::DeployOutcome& out, bool json) {
  if (json) {
    std::cout << out.record.dump(2) << "\n";
    return;
  }
  const bool passed = out.verdict == rollout::Verdict::kPass;
  std::printf("deploy %s: %s after %.1f s: %s\n", out.id.c_str(), passed ? "PASSED" : "FAILED",
              std::chrono::duration<double>(out.decided_after).count(), out.reason.c_str());
  if (!out.left_running.empty()) {
    std::string ids;
    for (const std::string& id : out.left_running) ids += " " + id;
    std::printf("%s incomplete: could not stop%s; stop them by hand\n",
                passed ? "deploy" : "REVERT", ids.c_str());
  } else if (!passed && out.nothing_changed) {
    std::printf("nothing was started or stopped\n");
  } else if (!passed && out.record.contains("new_instances")) {
    std::printf("reverted in %.1f s; the previous version serves\n",
                std::chrono::duration<double>(out.rollback_took).count());
  }
}

// `drover deploy`'s exit codes (its --help and the README list them).
constexpr int kDeployNotReached = cli::kExitUnreachable;  // 3: nothing started
constexpr int kDeployRefused = 4;                         // refused before starting: nothing did
constexpr int kDeployIncomplete = 5;                      // instances left running: see output

int DeployExitCode(const rollout::DeployOutcome& out) {
  if (!out.left_running.empty()) return kDeployIncomplete;
  if (out.verdict == rollout::Verdict::kPass) return cli::kExitOk;
  if (out.nothing_changed) return out.unreachable ? kDeployNotReached : kDeployRefused;
  return cli::kExitRefused;  // failed, reverted
}

// What a controller needs around the Deployer: clients of the hosts' agents, and Ctrl-C,
// SIGTERM or a closed terminal (SIGHUP) failing the deploy and reverting it, rather than leaving
// it half done (a second one gives up on the revert and says what may still run). `drive` runs
// the deploy; the exit code follows its outcome.
using Drive = std::function<rollout::DeployOutcome(const std::vector<rollout::AgentHost>& hosts,
                                                   std::stop_token stop)>;
int Control(const std::vector<rollout::AgentTarget>& targets, const std::string& agent_ca,
            Duration stop_grace, const std::string& what, bool json, const Drive& drive) {
  // A stop answers after the instance is gone: up to its grace, and the agent's kill after it.
  const auto stop_wait =
      std::chrono::seconds(15) + std::chrono::duration_cast<std::chrono::seconds>(stop_grace);
  std::vector<rollout::AgentClient> clients;
  for (const rollout::AgentTarget& t : targets) {
    clients.emplace_back(
        Connect(t.url, "agent", std::max<std::chrono::seconds>(std::chrono::seconds(30), stop_wait),
                agent_ca));
  }
  std::vector<rollout::AgentHost> hosts;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const rollout::AgentTarget& t = targets[i];
    hosts.push_back({t.name, t.url, t.zone, t.capacity, &clients[i]});
  }
  const SignalWatcher signals(
      BlockShutdownSignals({SIGHUP}),
      [](int sig) {
        spdlog::warn("deploy: {}; failing the deploy and reverting (again to abandon it)",
                     strsignal(sig));
      },
      [&what](int sig) {
        spdlog::error(
            "deploy: {} again; abandoning the revert: instances of {} may still run (drover "
            "rollout status; the agents' GET /v1/instances)",
            strsignal(sig), what);
        std::_Exit(130);
      });
  const rollout::DeployOutcome out = drive(hosts, signals.stop_token());
  PrintOutcome(out, json);
  return DeployExitCode(out);
}

int RunDeploy(const rollout::DeployRequest& request, bool json) {
  auto spec = rollout::DeploySpecOf(request);
  if (!spec.ok()) Fail(2, spec.status().message());
  net::HttpClient registry =
      Connect(request.registry, "registry", std::chrono::seconds(30), request.registry_ca);
  auto targets = rollout::AgentTargets(request.agent, request.agents, registry);
  if (!targets.ok()) {
    // Unreachable: 3; the registry refused to list the agents: 4; no agent matches: usage.
    const StatusCode code = targets.status().code();
    Fail(code == StatusCode::kUnavailable ? kDeployNotReached
         : code == StatusCode::kUnauthenticated || code == StatusCode::kPermissionDenied
             ? kDeployRefused
             : cli::kExitUsage,
         targets.status().message() + "; nothing started");
  }
  RealClock clock;
  return Control(
      *targets, request.agent_ca, spec->stop_grace, request.service + " " + request.version, json,
      [&](const std::vector<rollout::AgentHost>& hosts, std::stop_token stop) {
        return rollout::DeployThroughAgents(hosts, registry, clock, *spec, std::move(stop));
      });
}

// `drover rollout resume` of a deploy whose controller died: this process takes it over.
int TakeOver(const nlohmann::json& deploy, const net::HttpClient& registry,
             const std::string& agent_ca, bool json) {
  const nlohmann::json& record = deploy["record"];
  auto spec = rollout::DeploySpecFromJson(record.value("spec", nlohmann::json::object()));
  if (!spec.ok()) Fail(1, spec.status().message());
  std::vector<rollout::AgentTarget> targets;
  for (const auto& h : record.value("hosts", nlohmann::json::array())) {
    targets.push_back({h.value("name", ""), h.value("address", ""), h.value("zone", ""), 0, {}});
    if (targets.back().url.empty()) {
      Fail(1, "the record does not say where host " + targets.back().name + " is");
    }
  }
  spdlog::warn("rollout: the controller of {} is gone (its lease lapsed); taking the deploy over",
               deploy.value("id", ""));
  RealClock clock;
  return Control(targets, agent_ca, spec->stop_grace, deploy.value("id", ""), json,
                 [&](const std::vector<rollout::AgentHost>& hosts, std::stop_token stop) {
                   return rollout::ResumeThroughAgents(deploy, hosts, registry, clock,
                                                       std::move(stop));
                 });
}

void AddGateOptions(CLI::App& d, rollout::DeployRequest& r) {
  d.add_option("--min-healthy-ms", r.min_healthy_ms,
               "READY this long, continuously, before the crash checks")
      ->check(CLI::Range(0, 3'600'000))
      ->capture_default_str();
  d.add_option("--check-delay-ms", r.check_delay_ms, "Between crash checks")
      ->check(CLI::Range(0, 600'000))
      ->capture_default_str();
  d.add_option("--progress-deadline-ms", r.progress_deadline_ms,
               "No verdict by then: fail and roll back")
      ->check(CLI::Range(1'000, 86'400'000))
      ->capture_default_str();
  d.add_option("--stop-grace-ms", r.stop_grace_ms,
               "How long an instance may take to shut down in order before it is killed")
      ->check(CLI::Range(0, 600'000))
      ->capture_default_str();
  d.add_option("--drain-delay-ms", r.drain_delay_ms,
               "After marking instances DRAINING in the registry, before stopping them")
      ->check(CLI::Range(0, 600'000))
      ->capture_default_str();
  d.add_option("--host-timeout-ms", r.host_timeout_ms,
               "An agent unreachable this long during a batch fails the deploy")
      ->check(CLI::Range(100, 3'600'000))
      ->capture_default_str();
  d.add_option("--controller-lease-ms", r.controller_lease_ms,
               "This controller's claim on the deploy, renewed every third of it; after it "
               "lapses, `drover rollout resume ID` may take the deploy over")
      ->check(CLI::Range(1'000, 3'600'000))
      ->capture_default_str();
}

void AddStrategyOptions(CLI::App& d, rollout::DeployRequest& r) {
  d.add_option("--agent", r.agent,
               "An agent's URL, one per host (repeatable; default http://127.0.0.1:7080)");
  d.add_option("--agents", r.agents,
               "The agents registered in the registry: all, or those whose labels match "
               "key=value[,key=value] (zone=eu-1)");
  d.add_option("--max-surge", r.max_surge,
               "New instances above --instances at once: a count or a percent (rounded up)")
      ->capture_default_str();
  d.add_option("--max-unavailable", r.max_unavailable,
               "Instances below --instances at once: a count or a percent (rounded down)")
      ->capture_default_str();
  d.add_option("--canary", r.canary,
               "A first batch of this many (count or percent); the rest follow on `drover "
               "rollout promote ID`, or after --canary-pause-ms");
  d.add_option("--canary-pause-ms", r.canary_pause_ms,
               "How long the passed canary serves alone before the other batches (0: until "
               "promoted)")
      ->check(CLI::Range(0, 86'400'000));
}

void AddDeployCommand(CLI::App& app) {
  auto request = std::make_shared<rollout::DeployRequest>();
  auto spec_file = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  CLI::App* d = app.add_subcommand(
      "deploy",
      "Deploy a new version of a service over `drover agent`s, one per host, in batches: each "
      "starts its new instances, passes them only when READY in the registry for "
      "--min-healthy-ms and their latest crash has not moved between checks, then drains and "
      "stops the old ones it replaces. A failing batch reverts the deploy: old instances "
      "stopped so far start again and serve before the new ones stop. Exit code 0 passed; 1 "
      "failed and reverted (the previous version serves); 2 bad usage; 3 an agent or the "
      "registry could not be reached, nothing started; 4 refused before anything started (a "
      "program a host cannot run, another deploy of the service running, a token without the "
      "right): nothing changed; 5 instances it had to stop could not be stopped (see the "
      "output).");
  d->add_option("service", request->service, "Service to deploy");
  d->add_option("--spec", *spec_file,
                "YAML: service, version, command (list), env (map), instances, agent (URL or "
                "list), agents, agent_ca, registry, registry_ca, max_surge, max_unavailable, "
                "canary, canary_pause_ms, min_healthy_ms, check_delay_ms, progress_deadline_ms, "
                "stop_grace_ms, drain_delay_ms, host_timeout_ms, controller_lease_ms; flags win")
      ->check(CLI::ExistingFile);
  d->add_option("--version", request->version, "The new version (names the instances)");
  d->add_option("--instances", request->instances, "Instances of the new version")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  d->add_option("--env", request->env, "KEY=VALUE for the instances' environment (repeatable)");
  AddRegistryUrlOption(*d, request->registry);
  d->add_option("--agent-ca", request->agent_ca,
                "CA certificate (PEM) for an https:// agent (default: the system's trust store)")
      ->check(CLI::ExistingFile);
  d->add_option("--registry-ca", request->registry_ca,
                "CA certificate (PEM) for an https:// registry (default: the system's trust store)")
      ->check(CLI::ExistingFile);
  AddGateOptions(*d, *request);
  AddStrategyOptions(*d, *request);
  d->add_flag("--json", *json, "Print the deploy record as JSON");
  d->footer(
      "After --: the program and its arguments (or `command:` in --spec); {id} {service} "
      "{version} {port} {health_port} {host} are replaced per instance ({host}: the agent's "
      "advertised host).");
  // Words before "--" that are not deploy's own are caught below with a better message than
  // CLI11's: the program must follow "--".
  d->allow_extras();
  d->callback([request, spec_file, json, d] {
    if (const std::vector<std::string> stray = d->remaining(); !stray.empty()) {
      if (stray.front().starts_with("-")) {
        Fail(cli::kExitUsage, "unknown option " + stray.front() + " (drover deploy --help)");
      }
      Fail(cli::kExitUsage, "put the program after --: drover deploy " + request->service +
                                " --version ... -- " + stray.front() + " ...");
    }
    request->command = WordsAfterDoubleDash().words;
    if (!spec_file->empty()) {
      Result<std::string> text = ReadConfigFile(*spec_file);
      const Status s = text.ok()
                           ? rollout::ApplyDeploySpec(*text, *spec_file, FlagGivenIn(*d), *request)
                           : text.status();
      if (!s.ok()) Fail(cli::kExitUsage, s.message());
    }
    if (const int code = RunDeploy(*request, *json); code != 0) throw CLI::RuntimeError(code);
  });
}

// --- drover rollout ------------------------------------------------------------------------

void AddRolloutControl(CLI::App& app) {
  struct Args {
    std::string verb;
    std::string id;
    std::string registry = "http://127.0.0.1:7070";
    std::string registry_ca;
    std::string agent_ca;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* r = app.add_subcommand(
      "rollout",
      "Look at or steer one deploy through the registry that keeps it: status, pause (after the "
      "batch running now), resume (go on; a deploy whose controller died is taken over and "
      "finished here), abort (fail it and revert), promote (go on after the canary batch). "
      "Writes need a token with the deploy right ($DROVER_TOKEN).");
  r->add_option("verb", args->verb, "status | pause | resume | abort | promote")
      ->required()
      ->check(CLI::IsMember({"status", "pause", "resume", "abort", "promote"}));
  r->add_option("id", args->id, "The deploy's id (drover ctl deploys SERVICE)")->required();
  AddRegistryUrlOption(*r, args->registry);
  r->add_option("--registry-ca", args->registry_ca, "CA certificate (PEM) for an https:// registry")
      ->check(CLI::ExistingFile);
  r->add_option("--agent-ca", args->agent_ca,
                "CA certificate (PEM) for https:// agents, when resume takes a deploy over")
      ->check(CLI::ExistingFile);
  r->add_flag("--json", args->json, "Print the deploy as JSON");
  r->callback([args] {
    const net::HttpClient registry =
        Connect(args->registry, "registry", std::chrono::seconds(30), args->registry_ca);
    if (args->verb == "resume") {
      // A deploy whose controller is gone is taken over here; a live one is asked to go on.
      auto stored = rollout::RegistryDeploy(registry, args->id);
      if (stored.ok() && stored->value("active", false) && !rollout::ControllerAlive(*stored)) {
        const int code = TakeOver(*stored, registry, args->agent_ca, args->json);
        if (code != 0) throw CLI::RuntimeError(code);
        return;
      }
    }
    auto deploy = args->verb == "status" ? rollout::RegistryDeploy(registry, args->id)
                                         : rollout::RequestRollout(registry, args->id, args->verb);
    if (!deploy.ok()) {
      const StatusCode code = deploy.status().code();
      Fail(code == StatusCode::kUnavailable ? 3 : 1, deploy.status().message());
    }
    if (args->json) {
      std::cout << deploy->dump(2) << "\n";
    } else {
      std::cout << rollout::DeploySummary(*deploy);
    }
  });
}

}  // namespace

void AddRolloutCommands(CLI::App& app) {
  AddAgentCommand(app);
  AddDeployCommand(app);
  AddRolloutControl(app);
}

}  // namespace drover::cli
