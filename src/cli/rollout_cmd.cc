// `drover agent` (the local platform: a process supervisor with an HTTP API) and `drover deploy`
// (the deploy controller: surge rollout, health gate, rollback), RO-1..RO-4.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent_client.h"
#include "commands.h"
#include "config_files.h"
#include "http_client.h"
#include "rollout/agent_server.h"
#include "rollout/deployer.h"
#include "rollout/json_codec.h"
#include "rollout/supervisor.h"

namespace drover::cli {
namespace {

using json = nlohmann::json;

[[noreturn]] void Fail(int code, const std::string& message) {
  std::cerr << "drover: " << message << "\n";
  throw CLI::RuntimeError(code);
}

// `peer` is "agent" or "registry", for error messages. `timeout` bounds a whole exchange.
// `ca_file`: the CA an https:// peer's certificate is checked against (default: the system's).
HttpClient Connect(const std::string& url, const std::string& peer,
                   std::chrono::seconds timeout = std::chrono::seconds(30),
                   const std::string& ca_file = {}) {
  std::string token;
  if (const char* env = std::getenv("DROVER_TOKEN")) token = env;
  auto client = HttpClient::Create(url, token, timeout, ca_file, peer);
  if (!client.ok()) Fail(2, "--" + peer + ": " + client.status().message());
  return std::move(client).value();
}

// --- drover agent ----------------------------------------------------------------------------

struct AgentArgs {
  std::string data_dir = "drover-agent";
  std::string listen = "127.0.0.1:7080";
  int event_limit = 5;
  int max_restarts = 5;
  int restart_window_s = 60;
};

int RunAgent(const AgentArgs& args) {
  const sigset_t signals = BlockShutdownSignals();
  RealClock clock;
  rollout::SupervisorOptions options;
  options.data_dir = args.data_dir;
  options.event_limit = static_cast<std::size_t>(args.event_limit);
  options.max_restarts = args.max_restarts;
  options.restart_window = std::chrono::seconds(args.restart_window_s);
  auto supervisor = rollout::Supervisor::Open(options, clock);
  if (!supervisor.ok()) {
    spdlog::error("{}", supervisor.status().ToString());
    return 1;
  }
  auto server = rollout::AgentServer::Start(**supervisor, args.data_dir, args.listen);
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    return 1;
  }
  const std::string host = args.listen.substr(0, args.listen.rfind(':'));
  std::printf("drover agent listening on http://%s:%u (data dir %s)\n", host.c_str(),
              static_cast<unsigned>((*server)->port()), args.data_dir.c_str());
  std::fflush(stdout);
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("agent: {} received; stopping the instances (they restart with the agent)",
               strsignal(signal_number));
  server->reset();
  supervisor->reset();
  return 0;
}

// --- drover deploy ---------------------------------------------------------------------------

int RunDeploy(const DeployArgs& args) {
  if (args.service.empty()) Fail(2, "which service? (SERVICE or `service:` in --spec)");
  if (args.version.empty()) Fail(2, "--version is required");
  if (args.command.empty()) Fail(2, "no command: give it after -- or as `command:` in --spec");
  rollout::DeploySpec spec;
  spec.service = args.service;
  spec.version = args.version;
  spec.argv = args.command;
  for (const std::string& e : args.env) {
    const auto eq = e.find('=');
    if (eq == std::string::npos || eq == 0) Fail(2, "--env wants KEY=VALUE, got '" + e + "'");
    spec.env[e.substr(0, eq)] = e.substr(eq + 1);
  }
  spec.instances = args.instances;
  spec.gate.min_healthy = std::chrono::milliseconds(args.min_healthy_ms);
  spec.gate.check_delay = std::chrono::milliseconds(args.check_delay_ms);
  spec.gate.progress_deadline = std::chrono::milliseconds(args.progress_deadline_ms);
  spec.stop_grace = std::chrono::milliseconds(args.stop_grace_ms);
  if (Status s = rollout::ValidateGateOptions(spec.gate); !s.ok()) Fail(2, s.message());

  // A stop answers after the instance is gone: up to its grace, and the agent's kill after it.
  AgentClient agent(
      Connect(args.agent, "agent",
              std::max(std::chrono::seconds(30),
                       std::chrono::seconds(15) +
                           std::chrono::duration_cast<std::chrono::seconds>(spec.stop_grace))));
  const HttpClient registry =
      Connect(args.registry, "registry", std::chrono::seconds(30), args.registry_ca);
  RealClock clock;
  rollout::Deployer deployer(
      agent, [&](const std::string& service) { return RegistryReadiness(registry, service); },
      [&](const std::string& id, const json& record) { return agent.Record(id, record); }, clock,
      [&](const std::string& service, const std::string& id) {
        return RegistryForget(registry, service, id);
      });
  // Ctrl-C, SIGTERM or a closed terminal (SIGHUP): fail the deploy and roll back, rather than
  // leave it half done. A second one gives up on the rollback and says what may still run.
  sigset_t signals = BlockShutdownSignals();
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::stop_source interrupt;
  std::jthread watcher([&](std::stop_token done) {
    timespec tick{0, 100'000'000};
    while (!done.stop_requested()) {
      const int sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig <= 0) continue;
      if (!interrupt.stop_requested()) {
        spdlog::warn("deploy: {}; failing the deploy and rolling back (again to abandon it)",
                     strsignal(sig));
        interrupt.request_stop();
        continue;
      }
      spdlog::error(
          "deploy: {} again; abandoning the rollback: instances of {} {} may still "
          "run (drover ctl deploys; the agent's GET /v1/instances)",
          strsignal(sig), args.service, args.version);
      std::_Exit(130);
    }
  });
  const rollout::DeployOutcome out = deployer.Run(spec, interrupt.get_token());
  watcher.request_stop();
  if (args.json) {
    std::cout << out.record.dump(2) << "\n";
  } else {
    std::printf("deploy %s: %s after %.1f s: %s\n", out.id.c_str(),
                out.verdict == rollout::Verdict::kPass ? "PASSED" : "FAILED",
                std::chrono::duration<double>(out.decided_after).count(), out.reason.c_str());
    if (!out.left_running.empty()) {
      std::string ids;
      for (const std::string& id : out.left_running) ids += " " + id;
      std::printf("%s incomplete: could not stop%s; stop them by hand\n",
                  out.verdict == rollout::Verdict::kPass ? "deploy" : "ROLLBACK", ids.c_str());
    } else if (out.verdict != rollout::Verdict::kPass && out.record.contains("new_instances")) {
      std::printf("rolled back in %.1f s; the previous version kept serving\n",
                  std::chrono::duration<double>(out.rollback_took).count());
    }
  }
  if (!out.left_running.empty()) return 3;
  return out.verdict == rollout::Verdict::kPass ? 0 : 1;
}

}  // namespace

void AddRolloutCommands(CLI::App& app) {
  auto agent = std::make_shared<AgentArgs>();
  CLI::App* a = app.add_subcommand(
      "agent",
      "Run the local platform: start, supervise and stop service instances as child processes "
      "(restart with back-off, give up on crash loops, bounded event lists), with an HTTP API "
      "for `drover deploy`");
  a->add_option("--data-dir", agent->data_dir,
                "Directory for instance logs, the desired instances and the deploy history")
      ->capture_default_str();
  a->add_option("--listen", agent->listen, "HTTP API address host:port (port 0: any free port)")
      ->capture_default_str();
  a->add_option("--event-limit", agent->event_limit, "Events kept per instance")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  a->add_option("--max-restarts", agent->max_restarts,
                "Restarts allowed within --restart-window; one more crash and the agent gives "
                "up on the instance")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  a->add_option("--restart-window", agent->restart_window_s, "Seconds")
      ->check(CLI::Range(1, 86'400))
      ->capture_default_str();
  a->callback([agent] {
    if (const int code = RunAgent(*agent); code != 0) throw CLI::RuntimeError(code);
  });

  auto deploy = std::make_shared<DeployArgs>();
  CLI::App* d = app.add_subcommand(
      "deploy",
      "Deploy a new version of a service through a `drover agent`: start it next to the old "
      "one, pass it only when READY in the registry for --min-healthy-ms and its latest crash "
      "has not moved between checks, then stop the old one; otherwise stop the new one and keep "
      "the old. Exit code 0 passed, 1 failed (rolled back), 2 usage, 3 instances it had to stop "
      "could not be stopped (see the output).");
  d->add_option("service", deploy->service, "Service to deploy");
  d->add_option("--spec", deploy->spec_file,
                "YAML: service, version, command (list), env (map), instances, agent, registry, "
                "registry_ca, "
                "min_healthy_ms, check_delay_ms, progress_deadline_ms, stop_grace_ms; flags win")
      ->check(CLI::ExistingFile);
  d->add_option("--version", deploy->version, "The new version (names the instances)");
  d->add_option("--instances", deploy->instances, "Instances of the new version")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  d->add_option("--env", deploy->env, "KEY=VALUE for the instances' environment (repeatable)");
  d->add_option("--agent", deploy->agent, "The agent's URL")->capture_default_str();
  d->add_option("--registry", deploy->registry, "The registry's HTTP(S) URL")
      ->capture_default_str();
  d->add_option("--registry-ca", deploy->registry_ca,
                "CA certificate (PEM) for an https:// registry (default: the system's trust store)")
      ->check(CLI::ExistingFile);
  d->add_option("--min-healthy-ms", deploy->min_healthy_ms,
                "READY this long, continuously, before the crash checks")
      ->check(CLI::Range(0, 3'600'000))
      ->capture_default_str();
  d->add_option("--check-delay-ms", deploy->check_delay_ms, "Between crash checks")
      ->check(CLI::Range(0, 600'000))
      ->capture_default_str();
  d->add_option("--progress-deadline-ms", deploy->progress_deadline_ms,
                "No verdict by then: fail and roll back")
      ->check(CLI::Range(1'000, 86'400'000))
      ->capture_default_str();
  d->add_option("--stop-grace-ms", deploy->stop_grace_ms,
                "How long an instance may take to shut down in order before it is killed")
      ->check(CLI::Range(0, 600'000))
      ->capture_default_str();
  d->add_flag("--json", deploy->json, "Print the deploy record as JSON");
  d->add_option("command", deploy->command,
                "After --: the program and its arguments; {id} {service} {version} {port} "
                "{health_port} are replaced per instance");
  d->callback([deploy, d] {
    if (!deploy->spec_file.empty()) {
      const auto given = [d](std::string_view flag) {
        const CLI::Option* option = d->get_option_no_throw(std::string(flag));
        return option != nullptr && option->count() > 0;
      };
      Result<std::string> text = ReadConfigFile(deploy->spec_file);
      const Status s =
          text.ok() ? ApplyDeploySpec(*text, deploy->spec_file, given, *deploy) : text.status();
      if (!s.ok()) Fail(2, s.message());
    }
    if (const int code = RunDeploy(*deploy); code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace drover::cli
