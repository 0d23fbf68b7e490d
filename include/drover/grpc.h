// gRPC defaults (seed 003, RT-7). Behind one L4 address a gRPC client pins one connection: every
// call goes to one backend, new backends see nothing until a connection breaks, and a backend
// that died without a GOAWAY keeps receiving calls until they time out. The defaults here are
// the fix, each overridable:
//   client: keepalive ping every 60 s, dead after 10 s without an answer, also when idle;
//           round-robin over every READY + accepting instance of the service;
//           a deadline and a retry policy per service, never global;
//   server: accept client pings down to every 50 s, also without calls; close connections after
//           60 s (gRPC adds +-10% jitter) with 10 s grace, so clients re-resolve and spread.
//
// The configuration (service config, multi-address target) needs no gRPC headers and lives in
// drover_sdk_core; applying it to builders and channels, and the registry-backed channel, are in
// drover_sdk. This header only forward-declares gRPC's types.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "drover/clock.h"
#include "drover/discovery.h"
#include "drover/status.h"

namespace grpc {
class Channel;
class ChannelArguments;
class ClientContext;
class Server;
class ServerBuilder;
}  // namespace grpc

namespace drover {
struct HostOptions;
}  // namespace drover

namespace drover::router {
class RoutingTable;
}  // namespace drover::router

namespace drover::grpc_defaults {

// gRPC's retry policy for one service's methods (the channel retries transparently).
struct RetryPolicy {
  int max_attempts = 3;  // the first call included; 1 disables retries; gRPC caps it at 5
  Duration initial_backoff = std::chrono::milliseconds(100);
  Duration max_backoff = std::chrono::seconds(1);
  double backoff_multiplier = 2.0;
  // Status codes (as gRPC spells them) worth another attempt. UNAVAILABLE: the call never
  // reached the application (connection refused, reset, GOAWAY), so it is safe to repeat.
  std::vector<std::string> retryable_codes = {"UNAVAILABLE"};
};

struct ChannelOptions {
  // Ping an idle or busy connection this often, so a dead peer is found without a call having
  // to time out first (seed 003: a SIGKILLed pod kept getting calls).
  Duration keepalive_time = std::chrono::seconds(60);
  // No answer to a ping for this long: the connection is dead, and calls move to the others.
  Duration keepalive_timeout = std::chrono::seconds(10);
  bool keepalive_without_calls = true;
  // The gRPC service these defaults apply to ("pkg.Service"); empty: every method.
  std::string service;
  Duration deadline = std::chrono::seconds(5);  // per call, through SetDeadline
  RetryPolicy retry;
};

struct ServerOptions {
  // The shortest client ping interval accepted (a client pinging faster gets GOAWAY
  // too_many_pings); below the client's 60 s, so the defaults agree.
  Duration keepalive_permit = std::chrono::seconds(50);
  bool permit_without_calls = true;
  // Connections are closed (GOAWAY) after this, with gRPC's +-10% jitter, so that clients
  // re-resolve and new instances get their share (seed 003: 45 s and more without a call).
  Duration max_connection_age = std::chrono::seconds(60);
  Duration max_connection_age_grace = std::chrono::seconds(10);  // in-flight calls may finish
};

// INVALID_ARGUMENT for values gRPC would reject or silently change.
Status Validate(const ChannelOptions& options);
Status Validate(const ServerOptions& options);

// The channel's service config as JSON: round_robin, and one method config with (when
// max_attempts > 1) the retry policy. The deadline is not in it: SetDeadline puts it on each call.
std::string ServiceConfigJson(const ChannelOptions& options);

// A gRPC target that lists every Routable() instance of `table` -- "ipv4:10.0.0.5:7000,..." or
// "ipv6:[::1]:7000,..." -- in the table's (id) order. UNAVAILABLE when none is routable;
// INVALID_ARGUMENT when an address is not an IP literal with a port, or families are mixed.
Result<std::string> MultiAddressTarget(const router::RoutingTable& table);

// "0.100s": a Duration as a google.protobuf.Duration JSON string.
std::string DurationJson(Duration d);

// --- Applying them (drover_sdk) -----------------------------------------------------------------

// Keepalive permit (and without calls), max connection age and its grace on a server builder.
void ConfigureServer(grpc::ServerBuilder& builder, const ServerOptions& options);
// Keepalive (and without calls), retries enabled, and the service config on channel arguments.
void ApplyChannelOptions(grpc::ChannelArguments& args, const ChannelOptions& options);
// The call's deadline: now + options.deadline.
void SetDeadline(grpc::ClientContext& context, const ChannelOptions& options);

// Makes a ServerHost run `server` (built and started, listening on `address`) through the SDK's
// lifecycle: registered READY at `address` once warm, and at shutdown out of discovery first,
// then -- after the propagation delay, when clients have stopped sending -- gRPC's Shutdown,
// which refuses new calls and lets those in flight finish within the drain deadline.
// `server` must outlive the host.
void ServeWithHost(HostOptions& host, grpc::Server& server, const std::string& address);

// A channel over every READY + accepting instance of a registry service, round-robin, with the
// options applied. A thread follows the DiscoveryClient; when the set of routable addresses
// changes it builds a new channel and swaps it in -- calls already made keep the old one (their
// shared_ptr) until they finish, so nothing in flight is cut.
class ServiceChannel {
 public:
  static Result<std::unique_ptr<ServiceChannel>> Start(DiscoveryOptions discovery,
                                                       ChannelOptions options, Clock& clock);
  ~ServiceChannel();
  ServiceChannel(const ServiceChannel&) = delete;
  ServiceChannel& operator=(const ServiceChannel&) = delete;

  // The current channel; UNAVAILABLE while the service has no routable instance (or the
  // registry has not answered yet).
  Result<std::shared_ptr<grpc::Channel>> Get();
  // The target the current channel was built for ("ipv4:..."), and how many were built.
  std::string target() const;
  std::uint64_t builds() const;

  struct Impl;

 private:
  explicit ServiceChannel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::grpc_defaults
