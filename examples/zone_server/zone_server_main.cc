// zone_server: a small game-style TCP server on ServerHost, for trying Drover by hand and for
// the gateway and rollout tests. It warms up (map data, spawn tables, a database pool: simulated
// by waiting), then serves the zone line protocol (zone_protocol.h) and leaves the fleet cleanly
// on SIGTERM/SIGINT: out of discovery first, port closed after, sessions drained.
#include "zone_server_main.h"

#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string_view>
#include <thread>

#include "drover/cli.h"
#include "drover/host.h"
#include "drover/logging.h"
#include "zone_protocol.h"

namespace {

using drover::Duration;
using std::chrono::milliseconds;

// One stage of the simulated warm-up; returns early on shutdown.
drover::WarmupHook Stage(std::string name, milliseconds took) {
  return drover::WarmupHook{std::move(name), [took](std::stop_token stop) {
                              drover::RealClock clock;
                              clock.SleepFor(took, stop);
                              return drover::Status::Ok();
                            }};
}

}  // namespace

namespace drover::examples {

int ZoneServerMain(int argc, char** argv) {
  // Before any thread exists, so that every thread inherits the mask and only the signal thread
  // below receives SIGTERM/SIGINT.
  drover::BlockTerminationSignals();

  CLI::App app{
      "A sample game zone server on Drover's ServerHost: warms up, registers when ready, "
      "serves HELLO/PING/QUIT lines, leaves discovery before closing on SIGTERM.",
      "zone_server"};
  // Run as `drover sample ...`, it says so in usage and error messages.
  if (argc > 0 && std::string_view(argv[0]).starts_with("drover ")) app.name(argv[0]);
  drover::HostOptions options;
  options.service = "zone";
  drover::logging::LogOptions log_options;
  std::int64_t warmup_ms = 2000, ttl_ms = 10'000, propagation_ms = 2000, drain_ms = 20'000,
               grace_ms = 30'000;
  double crash_after = 0;
  std::size_t max_players = 0;
  app.add_option(
         "--registry", options.registry,
         "Registry gRPC address: host:port, or grpcs://host:port for TLS; several registries "
         "of one cluster comma-separated (a:7071,b:7071): fails over between them")
      ->required();
  app.add_option("--registry-ca", options.registry_ca,
                 "CA certificate (PEM) the registry's TLS certificate is checked against; "
                 "implies TLS (default with grpcs://: the system's trust store)")
      ->check(CLI::ExistingFile);
  app.add_option("--service", options.service, "Service to register in")->capture_default_str();
  app.add_option("--id", options.instance_id, "Instance id (default: <hostname>-<pid>)");
  app.add_option("--token", options.token, "Bearer token for the registry")
      ->envname("DROVER_TOKEN");
  app.add_option("--listen", options.listen, "Address for player connections, host:port")
      ->capture_default_str();
  app.add_option("--advertise", options.advertise,
                 "Address registered for clients (default: the listener's)");
  app.add_option("--health", options.health, "Address for /live, /ready and /metrics, host:port")
      ->capture_default_str();
  app.add_option("--version-label", options.version, "Release version to register");
  app.add_option("--zone", options.zone, "Availability zone to register");
  app.add_option("--max-players", max_players,
                 "Players at once beyond which the zone says it is full: the registry is told "
                 "to send no new ones (ServerHost::SetAccepting) while /ready stays 200 and the "
                 "players on it keep playing; 0: no limit")
      ->capture_default_str();
  app.add_option("--warmup-ms", warmup_ms, "Simulated warm-up time")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{3'600'000}))
      ->capture_default_str();
  app.add_option("--ttl-ms", ttl_ms, "Registry lease (the registry takes 1000 ms to 1 h)")
      ->check(CLI::Range(std::int64_t{1'000}, std::int64_t{3'600'000}))
      ->capture_default_str();
  app.add_option("--propagation-ms", propagation_ms,
                 "Wait between leaving discovery and closing the listener")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--drain-ms", drain_ms, "How long sessions may continue after the listener closes")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--grace-ms", grace_ms, "Upper bound for the whole shutdown")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--crash-after", crash_after,
                 "Abort this many seconds after becoming ready (0: never); for rollout tests")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--log-level", log_options.level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  app.add_flag("--log-json", log_options.json, "Logs as JSON lines");
  if (const auto code = drover::cli::ParseCommandLine(app, argc, argv)) return *code;
  if (auto s = drover::logging::Setup(log_options); !s.ok()) {
    std::cerr << "zone_server: " << s.message() << "\n";
    return 2;
  }

  options.ttl = milliseconds(ttl_ms);
  options.propagation_delay = milliseconds(propagation_ms);
  options.drain_deadline = milliseconds(drain_ms);
  options.grace_period = milliseconds(grace_ms);
  const milliseconds stage(warmup_ms / 3);
  options.warmup = {Stage("map data", stage), Stage("spawn tables", stage),
                    Stage("database pool", milliseconds(warmup_ms) - 2 * stage)};
  std::string instance;                    // the id, once known (the handler runs only after Start)
  drover::ServerHost* host_ptr = nullptr;  // set before Start: sessions arrive only after it
  std::mutex players_mu;
  std::size_t players = 0;  // guarded by players_mu; SetAccepting (which never blocks) under it
  // Zone full: at --max-players the zone asks for no new players; a player who arrives anyway
  // (a gateway that has not heard yet) is still served. One below the limit, it has room again.
  auto count_player = [&](int delta) {
    if (max_players == 0) return;
    std::lock_guard lock(players_mu);
    players = delta > 0 ? players + 1 : players - 1;
    // A call that changes nothing is ignored: only crossing the limit reaches the registry.
    (void)host_ptr->SetAccepting(players < max_players, std::to_string(players) + " players");
  };
  options.on_session = [&instance, &count_player](drover::Session& s) {
    count_player(+1);
    struct Left {  // counted out however the session ends
      decltype(count_player)& count;
      ~Left() { count(-1); }
    } left{count_player};
    drover::examples::ServeZoneSession(s, instance);
  };

  auto host = drover::ServerHost::Create(options);
  if (!host.ok()) {
    std::cerr << "zone_server: " << host.status().ToString() << "\n";
    return drover::cli::ExitCodeOf(host.status());
  }
  drover::ServerHost& h = **host;
  host_ptr = &h;
  instance = h.id();
  std::cout << "zone_server " << h.id() << ": warming up for " << warmup_ms
            << " ms; probes on http://" << options.health.substr(0, options.health.rfind(':'))
            << ":" << h.health_port() << "/ready" << std::endl;

  // SIGTERM/SIGINT -> Shutdown, from a thread of its own so that a signal during warm-up ends
  // the warm-up too. A SIGUSR1-free wake-up: when the start fails, main sends SIGTERM to this
  // thread (`start_failed` set first, so that it does not speak of a signal nobody sent).
  std::atomic<bool> start_failed{false};
  std::jthread signals([&h, &start_failed] {
    const int sig = drover::WaitForTerminationSignal();
    if (!start_failed.load()) {
      spdlog::info("zone_server: {}; leaving the fleet", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    h.Shutdown();
  });

  const drover::Status started = h.Start();
  if (!started.ok()) {
    if (started.code() != drover::StatusCode::kCancelled) {
      std::cerr << "zone_server: " << started.ToString() << "\n";
      start_failed.store(true);
      h.Shutdown();
      pthread_kill(signals.native_handle(), SIGTERM);
      return drover::cli::ExitCodeOf(started);
    }
    return 0;  // shut down during start; the signal thread ran Shutdown
  }
  std::cout << "zone_server " << h.id() << ": serving at " << h.address() << " as generation "
            << h.generation() << std::endl;

  std::jthread crasher;
  if (crash_after > 0) {
    crasher = std::jthread([crash_after](std::stop_token stop) {
      drover::RealClock clock;
      if (!clock.SleepFor(
              std::chrono::duration_cast<Duration>(std::chrono::duration<double>(crash_after)),
              stop)) {
        return;
      }
      spdlog::critical("zone_server: crashing on purpose (--crash-after {} s)", crash_after);
      const rlimit no_core{0, 0};
      ::setrlimit(RLIMIT_CORE, &no_core);
      std::abort();
    });
  }
  signals.join();  // returns after Shutdown completed
  return 0;
}

}  // namespace drover::examples
