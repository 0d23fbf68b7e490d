// whoami_client: seed 003's experiment client. Makes --calls calls and prints how many each
// instance answered -- through a plain channel to one --target (what a client behind an L4
// address does), or through Drover's channel over a --registry service (round-robin over every
// READY instance).
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <map>
#include <thread>

#include "drover/cli.h"
#include "drover/examples/whoami/v1/whoami.grpc.pb.h"
#include "drover/grpc.h"

namespace pb = drover::examples::whoami::v1;

int main(int argc, char** argv) {
  CLI::App app{"Counts WhoAmI answers per instance: one address, or Drover's channel",
               "whoami_client"};
  std::string target, registry, service = "whoami";
  int calls = 60, interval_ms = 0, deadline_ms = 5000, keepalive_ms = 60'000,
      keepalive_timeout_ms = 10'000;
  app.add_option("--target", target, "One address, host:port (a plain gRPC channel)");
  app.add_option("--registry", registry,
                 "Registry gRPC address (Drover's channel); several comma-separated");
  app.add_option("--service", service, "Registry service")->capture_default_str();
  app.add_option("--calls", calls, "Calls to make")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  app.add_option("--interval-ms", interval_ms, "Pause between calls")
      ->check(CLI::Range(0, 60'000))
      ->capture_default_str();
  app.add_option("--deadline-ms", deadline_ms, "Per-call deadline")
      ->check(CLI::Range(1, 3'600'000))
      ->capture_default_str();
  app.add_option("--keepalive-ms", keepalive_ms, "Client keepalive ping interval")
      ->check(CLI::Range(100, 86'400'000))
      ->capture_default_str();
  app.add_option("--keepalive-timeout-ms", keepalive_timeout_ms, "Ping answer timeout")
      ->check(CLI::Range(100, 86'400'000))
      ->capture_default_str();
  if (const auto code = drover::cli::ParseCommandLine(app, argc, argv)) return *code;
  if (target.empty() == registry.empty()) {
    std::cerr << "whoami_client: give exactly one of --target and --registry\n";
    return drover::cli::kExitUsage;
  }
  // gRPC's own target forms (dns:///h:p, unix:/path, ipv4:a:p, ...) go through as they are.
  const std::string scheme = target.substr(0, target.find(':'));
  const bool grpc_uri = target.find("://") != std::string::npos || scheme == "dns" ||
                        scheme == "unix" || scheme == "unix-abstract" || scheme == "ipv4" ||
                        scheme == "ipv6" || scheme == "vsock";
  if (!target.empty() && !grpc_uri) {
    // host:port with a real port: gRPC would read "127.0.0.1:" or "127.0.0.1:<port>" as port 0
    // and fail every call without saying why.
    const std::size_t colon = target.rfind(':');
    const std::string port = colon == std::string::npos ? "" : target.substr(colon + 1);
    const bool digits = !port.empty() && port.size() <= 5 &&
                        port.find_first_not_of("0123456789") == std::string::npos;
    if (colon == 0 || !digits || std::stoi(port) < 1 || std::stoi(port) > 65535) {
      std::cerr << "whoami_client: --target wants host:port with a port 1-65535, got '" << target
                << "'\n";
      return drover::cli::kExitUsage;
    }
  }
  drover::RealClock clock;
  drover::grpc_defaults::ChannelOptions options;
  options.deadline = std::chrono::milliseconds(deadline_ms);
  options.keepalive_time = std::chrono::milliseconds(keepalive_ms);
  options.keepalive_timeout = std::chrono::milliseconds(keepalive_timeout_ms);
  std::unique_ptr<drover::grpc_defaults::ServiceChannel> drover_channel;
  std::shared_ptr<grpc::Channel> channel;
  if (!target.empty()) {
    channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  } else {
    drover::DiscoveryOptions d;
    d.registry = registry;
    d.service = service;
    auto started = drover::grpc_defaults::ServiceChannel::Start(d, options, clock);
    if (!started.ok()) {
      std::cerr << "whoami_client: " << started.status().ToString() << "\n";
      return drover::cli::ExitCodeOf(started.status());
    }
    drover_channel = std::move(*started);
    drover::Status last;
    for (int i = 0; i < 100 && !channel; ++i) {  // until the registry has answered
      if (auto got = drover_channel->Get(); got.ok()) {
        channel = *got;
      } else {
        last = got.status();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    if (!channel) {
      std::cerr << "whoami_client: no routable instance of " << service << " after 5 s ("
                << last.message() << ")\n";
      return drover::cli::kExitRefused;
    }
  }
  std::map<std::string, int> per;  // answers per instance
  int failed = 0, unreachable = 0;
  std::string last_error;
  for (int i = 0; i < calls; ++i) {
    if (drover_channel) {
      if (auto got = drover_channel->Get(); got.ok()) channel = *got;
    }
    auto stub = pb::WhoAmI::NewStub(channel);
    grpc::ClientContext ctx;
    drover::grpc_defaults::SetDeadline(ctx, options);
    pb::WhoReply reply;
    const grpc::Status s = stub->Who(&ctx, pb::WhoRequest{}, &reply);
    if (s.ok()) {
      ++per[reply.instance()];
    } else {
      ++failed;
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
          s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        ++unreachable;
      }
      last_error = s.error_message();
    }
    if (interval_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
  // stdout: one "<instance> <answers>" line each; failures go to stderr and the exit code.
  for (const auto& [who, n] : per) std::cout << who << " " << n << "\n";
  if (failed == 0) return drover::cli::kExitOk;
  std::cerr << "whoami_client: " << failed << " of " << calls
            << " calls failed (last: " << last_error << ")\n";
  return unreachable == calls ? drover::cli::kExitUnreachable : drover::cli::kExitRefused;
}
