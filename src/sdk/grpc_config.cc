// The gRPC defaults as configuration (include/drover/grpc.h): service config and multi-address
// target, without gRPC headers.
#include <arpa/inet.h>

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/host_port.h"
#include "drover/grpc.h"
#include "drover/router.h"

namespace drover::grpc_defaults {
namespace {

using json = nlohmann::json;

bool Positive(Duration d) { return d > Duration::zero(); }

}  // namespace

std::string DurationJson(Duration d) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  char buf[48];
  std::snprintf(buf, sizeof buf, "%" PRId64 ".%09" PRId64,
                static_cast<std::int64_t>(ns / 1'000'000'000),
                static_cast<std::int64_t>(ns % 1'000'000'000));
  std::string out = buf;
  while (out.back() == '0') out.pop_back();  // "0.100000000" -> "0.1"
  if (out.back() == '.') out.pop_back();
  return out + "s";
}

Status Validate(const ChannelOptions& o) {
  if (!Positive(o.keepalive_time)) return InvalidArgumentError("keepalive_time must be > 0");
  if (!Positive(o.keepalive_timeout)) return InvalidArgumentError("keepalive_timeout must be > 0");
  if (!Positive(o.deadline)) return InvalidArgumentError("deadline must be > 0");
  const RetryPolicy& r = o.retry;
  if (r.max_attempts < 1 || r.max_attempts > 5) {
    return InvalidArgumentError("retry max_attempts must be 1..5 (gRPC caps it at 5)");
  }
  if (r.max_attempts > 1) {
    if (!Positive(r.initial_backoff) || !Positive(r.max_backoff)) {
      return InvalidArgumentError("retry backoffs must be > 0");
    }
    if (r.backoff_multiplier <= 0) return InvalidArgumentError("backoff_multiplier must be > 0");
    if (r.retryable_codes.empty()) {
      return InvalidArgumentError("a retry policy needs at least one retryable status code");
    }
  }
  return Status::Ok();
}

Status Validate(const ServerOptions& o) {
  if (!Positive(o.keepalive_permit)) return InvalidArgumentError("keepalive_permit must be > 0");
  if (!Positive(o.max_connection_age)) {
    return InvalidArgumentError("max_connection_age must be > 0");
  }
  if (o.max_connection_age_grace < Duration::zero()) {
    return InvalidArgumentError("max_connection_age_grace must be >= 0");
  }
  return Status::Ok();
}

std::string ServiceConfigJson(const ChannelOptions& o) {
  json name = o.service.empty() ? json::object() : json{{"service", o.service}};
  // No "timeout" here: with gRPC 1.51 a method-config timeout of about a second or less fails
  // calls at once (DEADLINE_EXCEEDED after microseconds, whatever the call's own deadline). The
  // deadline goes on each call instead (SetDeadline).
  json method = {{"name", json::array({name})}};
  if (o.retry.max_attempts > 1) {
    method["retryPolicy"] = {{"maxAttempts", o.retry.max_attempts},
                             {"initialBackoff", DurationJson(o.retry.initial_backoff)},
                             {"maxBackoff", DurationJson(o.retry.max_backoff)},
                             {"backoffMultiplier", o.retry.backoff_multiplier},
                             {"retryableStatusCodes", o.retry.retryable_codes}};
  }
  const json config = {{"loadBalancingConfig", json::array({{{"round_robin", json::object()}}})},
                       {"methodConfig", json::array({method})}};
  return config.dump();
}

Result<std::string> MultiAddressTarget(const router::RoutingTable& table) {
  std::string v4, v6;
  for (const router::Endpoint& e : table.endpoints()) {
    if (!e.Routable()) continue;
    auto address = ParseHostPort(e.address, "instance " + e.id + " address", {.require_ip = true});
    if (!address.ok()) return address.status();
    if (address->kind == HostKind::kIpv4) {
      v4 += (v4.empty() ? "" : ",") + address->ToString();
    } else {
      v6 += (v6.empty() ? "" : ",") + address->ToString();
    }
  }
  if (!v4.empty() && !v6.empty()) {
    return InvalidArgumentError("the service mixes IPv4 and IPv6 instances; one target holds one");
  }
  if (v4.empty() && v6.empty()) return UnavailableError("no routable instance");
  return v4.empty() ? "ipv6:" + v6 : "ipv4:" + v4;
}

}  // namespace drover::grpc_defaults
