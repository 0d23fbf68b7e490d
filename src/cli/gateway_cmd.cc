// `drover gateway`: the TCP and HTTP gateway in front of services' instances.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "commands.h"
#include "common/signals.h"
#include "gateway/config.h"
#include "gateway/gateway.h"

namespace drover::cli {
namespace {

struct GatewayArgs {
  std::string config;
  std::string registry;
  std::string admin;
  int threads = -1;
  int drain_ms = -1;
};

int RunGateway(const GatewayArgs& args) {
  auto config = gateway::LoadGatewayConfig(args.config);
  if (!config.ok()) {
    spdlog::error("gateway: {}", config.status().message());
    return 2;
  }
  if (!args.registry.empty()) config->registry = args.registry;
  if (!args.admin.empty()) config->admin = args.admin == "off" ? "" : args.admin;
  if (args.threads >= 0) config->threads = args.threads;
  if (args.drain_ms >= 0) config->drain = std::chrono::milliseconds(args.drain_ms);
  if (Status s = gateway::ValidateGatewayConfig(*config); !s.ok()) {
    spdlog::error("gateway: {}", s.message());
    return 2;
  }

  // Before any thread starts: every thread inherits the mask, only WaitForSignal gets them.
  const sigset_t signals = BlockShutdownSignals();
  RealClock clock;
  auto gw = gateway::Gateway::Start(*config, clock);
  if (!gw.ok()) {
    spdlog::error("gateway: {}", gw.status().message());
    return 1;
  }
  std::printf("%s\n", (*gw)->RoutingLine().c_str());
  std::fflush(stdout);
  const int signal_number = WaitForSignal(signals);
  spdlog::info("gateway: {} received, shutting down", strsignal(signal_number));
  (*gw)->Shutdown();
  return 0;
}

}  // namespace

void AddGatewayCommand(CLI::App& app) {
  auto args = std::make_shared<GatewayArgs>();
  CLI::App* cmd = app.add_subcommand(
      "gateway",
      "Run the gateway: TCP listeners route each new connection, HTTP/1.1 listeners each "
      "request (by path prefix), to a READY, accepting instance of a service -- P2C least "
      "connections with slow start, or consistent hashing on a key line or header -- following "
      "the registry's watch, with health checks, outlier ejection, retries and graceful drain");
  cmd->add_option(
         "--config", args->config,
         "YAML file: registry, registry_ca, token, threads, cpu_affinity (spread: each io thread "
         "on CPUs of its own, the default; none), admin, drain_ms and listeners (see "
         "docs/ARCHITECTURE.md, Gateway)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--registry", args->registry,
                  "Registry gRPC address, host:port or grpcs://host:port, or several of one "
                  "cluster comma-separated (overrides)");
  cmd->add_option("--admin", args->admin,
                  "Admin address host:port for /metrics and /admin/snapshot, or 'off' (overrides)");
  cmd->add_option("--threads", args->threads, "io threads; 0: one per core (overrides)")
      ->check(CLI::Range(0, 256));
  cmd->add_option("--drain-ms", args->drain_ms,
                  "On SIGTERM, how long open connections may continue (overrides)")
      ->check(CLI::Range(0, 3'600'000));
  cmd->callback([args] {
    const int code = RunGateway(*args);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace drover::cli
