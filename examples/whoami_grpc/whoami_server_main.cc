// whoami_server: seed 003's experiment server. A gRPC WhoAmI service that answers with its
// instance id, with Drover's server defaults (keepalive permit, max connection age), run by
// ServerHost: registered when ready, out of discovery before it drains on SIGTERM.
#include "whoami_server_main.h"

#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <iostream>
#include <string_view>
#include <thread>

#include "drover/cli.h"
#include "drover/examples/whoami/v1/whoami.grpc.pb.h"
#include "drover/grpc.h"
#include "drover/host.h"
#include "drover/logging.h"

namespace {

namespace pb = drover::examples::whoami::v1;

class WhoAmI final : public pb::WhoAmI::Service {
 public:
  explicit WhoAmI(const std::string* id) : id_(id) {}
  grpc::Status Who(grpc::ServerContext*, const pb::WhoRequest* req, pb::WhoReply* reply) override {
    if (req->delay_ms() > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(req->delay_ms(), 60'000u)));
    }
    reply->set_instance(*id_);
    return grpc::Status::OK;
  }

 private:
  const std::string* id_;
};

}  // namespace

namespace drover::examples {

int WhoamiServerMain(int argc, char** argv) {
  drover::BlockTerminationSignals();
  CLI::App app{"seed 003's WhoAmI gRPC server on Drover's defaults and ServerHost",
               "whoami_server"};
  // Run as `drover sample ...`, it says so in usage and error messages.
  if (argc > 0 && std::string_view(argv[0]).starts_with("drover ")) app.name(argv[0]);
  drover::HostOptions options;
  options.service = "whoami";
  drover::grpc_defaults::ServerOptions server_options;
  drover::logging::LogOptions log_options;
  std::string listen = "127.0.0.1:0";
  std::int64_t max_age_ms = 60'000, permit_ms = 50'000, ttl_ms = 10'000, propagation_ms = 2000,
               drain_ms = 20'000;
  app.add_option(
         "--registry", options.registry,
         "Registry gRPC address: host:port, or grpcs://host:port for TLS; several registries "
         "of one cluster comma-separated (a:7071,b:7071): fails over between them")
      ->required();
  app.add_option("--registry-ca", options.registry_ca,
                 "CA certificate (PEM) the registry's TLS certificate is checked against; "
                 "implies TLS (default with grpcs://: the system's trust store)")
      ->check(CLI::ExistingFile);
  app.add_option("--token", options.token, "Bearer token for the registry")
      ->envname("DROVER_TOKEN");
  app.add_option("--service", options.service, "Service to register in")->capture_default_str();
  app.add_option("--id", options.instance_id, "Instance id (default: <hostname>-<pid>)");
  app.add_option("--listen", listen, "gRPC address, host:port")->capture_default_str();
  app.add_option("--health", options.health, "Address for /live and /ready")->capture_default_str();
  app.add_option("--max-connection-age-ms", max_age_ms, "Server max connection age")
      ->check(CLI::Range(std::int64_t{100}, std::int64_t{86'400'000}))
      ->capture_default_str();
  app.add_option("--keepalive-permit-ms", permit_ms, "Shortest client ping interval accepted")
      ->check(CLI::Range(std::int64_t{100}, std::int64_t{86'400'000}))
      ->capture_default_str();
  app.add_option("--ttl-ms", ttl_ms, "Registry lease (the registry takes 1000 ms to 1 h)")
      ->check(CLI::Range(std::int64_t{1'000}, std::int64_t{3'600'000}))
      ->capture_default_str();
  app.add_option("--propagation-ms", propagation_ms, "Wait between leaving discovery and draining")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--drain-ms", drain_ms, "How long calls in flight may take to finish")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--log-level", log_options.level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  if (const auto code = drover::cli::ParseCommandLine(app, argc, argv)) return *code;
  if (auto s = drover::logging::Setup(log_options); !s.ok()) {
    std::cerr << "whoami_server: " << s.message() << "\n";
    return 2;
  }
  server_options.max_connection_age = std::chrono::milliseconds(max_age_ms);
  server_options.keepalive_permit = std::chrono::milliseconds(permit_ms);
  options.ttl = std::chrono::milliseconds(ttl_ms);
  options.propagation_delay = std::chrono::milliseconds(propagation_ms);
  options.drain_deadline = std::chrono::milliseconds(drain_ms);
  options.grace_period =
      options.propagation_delay + options.drain_deadline + std::chrono::seconds(5);

  std::string id;  // known once the host exists
  WhoAmI service(&id);
  grpc::ServerBuilder builder;
  drover::grpc_defaults::ConfigureServer(builder, server_options);
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::cerr << "whoami_server: cannot listen on " << listen << "\n";
    return 1;
  }
  const std::string address = listen.substr(0, listen.rfind(':')) + ":" + std::to_string(port);
  drover::grpc_defaults::ServeWithHost(options, *server, address);
  auto host = drover::ServerHost::Create(options);
  if (!host.ok()) {
    std::cerr << "whoami_server: " << host.status().ToString() << "\n";
    return drover::cli::ExitCodeOf(host.status());
  }
  drover::ServerHost& h = **host;
  id = h.id();
  std::jthread signals([&h] {
    (void)drover::WaitForTerminationSignal();
    h.Shutdown();
  });
  if (const drover::Status started = h.Start(); !started.ok()) {
    if (started.code() == drover::StatusCode::kCancelled) return 0;
    std::cerr << "whoami_server: " << started.ToString() << "\n";
    h.Shutdown();
    pthread_kill(signals.native_handle(), SIGTERM);
    return drover::cli::ExitCodeOf(started);
  }
  std::cout << "whoami_server " << id << ": serving gRPC at " << address << std::endl;
  signals.join();
  return 0;
}

}  // namespace drover::examples
