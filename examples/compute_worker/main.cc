// compute_worker: a compute node on ServerHost for the job-results path (seed 001). It registers
// in the registry when ready, takes `JOB <id> <step> <payload>` submissions (compute_protocol.h),
// and publishes each step's result to Redis -- or fails the way --mode says: a step error, a
// retryable one, a payload that breaks the contract, or a crash with no result at all.
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <iostream>
#include <thread>

#include "compute_protocol.h"
#include "drover/cli.h"
#include "drover/host.h"
#include "drover/logging.h"

int main(int argc, char** argv) {
  drover::BlockTerminationSignals();  // before any thread: only the signal thread gets them

  CLI::App app{
      "A sample compute node: registers when ready, accepts JOB submissions, publishes each "
      "step's result to Redis (or fails as --mode says), leaves discovery before it closes.",
      "compute_worker"};
  drover::HostOptions options;
  options.service = "compute";
  drover::logging::LogOptions log_options;
  std::string redis = "127.0.0.1:6379";
  std::string mode = "ok";
  std::int64_t work_ms = 50;
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
  app.add_option("--listen", options.listen, "Address for submissions, host:port")
      ->capture_default_str();
  app.add_option("--health", options.health, "Address for /live and /ready, host:port")
      ->capture_default_str();
  app.add_option("--redis", redis, "Redis address for results, host:port")->capture_default_str();
  app.add_option("--mode", mode, "ok, step_error, retryable, garbage or crash")
      ->capture_default_str();
  app.add_option("--work-ms", work_ms, "How long one step takes")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{3'600'000}))
      ->capture_default_str();
  app.add_option("--log-level", log_options.level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  if (const auto code = drover::cli::ParseCommandLine(app, argc, argv)) return *code;
  if (auto s = drover::logging::Setup(log_options); !s.ok()) {
    std::cerr << "compute_worker: " << s.message() << "\n";
    return 2;
  }
  drover::examples::WorkerBehaviour behaviour;
  auto parsed = drover::examples::ParseWorkerMode(mode);
  if (!parsed.ok()) {
    std::cerr << "compute_worker: " << parsed.status().message() << "\n";
    return 2;
  }
  behaviour.mode = *parsed;
  behaviour.work = std::chrono::milliseconds(work_ms);
  if (behaviour.mode == drover::examples::WorkerMode::kCrash) {
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
  }
  drover::jobs::RedisOptions redis_options;
  redis_options.address = redis;
  auto store = drover::jobs::RedisStore::Open(redis_options);
  if (!store.ok()) {
    std::cerr << "compute_worker: " << store.status().message() << "\n";
    return drover::cli::ExitCodeOf(store.status());
  }
  options.warmup = {};
  options.readiness.push_back({"redis", [s = store->get()] {
                                 // Ready only while results can be published.
                                 return s->Get("drover:ping").status();
                               }});
  std::string instance;
  options.on_session = [&instance, &behaviour, s = store->get()](drover::Session& session) {
    drover::examples::ServeComputeSession(session, instance, behaviour, *s);
  };
  auto host = drover::ServerHost::Create(options);
  if (!host.ok()) {
    std::cerr << "compute_worker: " << host.status().ToString() << "\n";
    return drover::cli::ExitCodeOf(host.status());
  }
  drover::ServerHost& h = **host;
  instance = h.id();
  std::jthread signals([&h] {
    (void)drover::WaitForTerminationSignal();
    h.Shutdown();
  });
  const drover::Status started = h.Start();
  if (!started.ok()) {
    if (started.code() != drover::StatusCode::kCancelled) {
      std::cerr << "compute_worker: " << started.ToString() << "\n";
      h.Shutdown();
      pthread_kill(signals.native_handle(), SIGTERM);
      return drover::cli::ExitCodeOf(started);  // 3: redis or the registry never answered
    }
    return 0;  // stopped by a signal before it was ready (the host said what it waited for)
  }
  std::cout << "compute_worker " << h.id() << ": serving at " << h.address() << " (mode " << mode
            << ", results to redis at " << redis << ")" << std::endl;
  signals.join();
  return 0;
}
