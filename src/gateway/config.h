// The gateway's configuration: listeners, each bound to one service with a routing policy.
//
//   registry: 127.0.0.1:7071        # gRPC address of the registry
//   token: ...                      # bearer token, if the registry wants one
//   threads: 2                      # io threads (default: the number of cores)
//   admin: 127.0.0.1:9900           # /metrics, /admin/snapshot, /live, /ready ("" disables)
//   drain_ms: 10000                 # graceful shutdown: sessions may finish for this long
//   listeners:
//     - name: zone
//       protocol: tcp
//       address: 0.0.0.0:7000
//       service: zone
//       policy: p2c                 # p2c (least connections of two, slow start) | hash |
//       least_conn slow_start_ms: 30000        # p2c: weight ramps from slow_start_min_percent to
//       100% slow_start_min_percent: 10 hash: maglev                # hash: maglev | ring; the key
//       is the first line (see below) bounded_load: 1.25          # hash: no instance takes more
//       than c x its fair share connect_timeout_ms: 1000 connect_attempts: 3         # distinct
//       instances tried before the client is closed idle_timeout_ms: 300000     # no byte either
//       way for this long: both sides closed key_timeout_ms: 5000        # hash: time allowed for
//       the key line
//
// Key-affine TCP (policy hash): the client's first line is "DROVER-KEY <key>\n" (at most 512
// bytes). The gateway consumes it -- the upstream never sees it -- and routes the key with
// consistent hashing and bounded load; everything after it is proxied untouched. A missing or
// malformed key line closes the connection before any upstream is chosen.
// `least_conn` (plain least connections, no slow start) exists as the baseline that replays the
// seed-000 incident; it is not for production.
// Unknown keys and out-of-range values are errors, with the key's path in the message.
#pragma once

#include <string>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover::gateway {

enum class Policy { kP2c, kHash, kLeastConn };
enum class HashKind { kMaglev, kRing };

struct ListenerConfig {
  std::string name;
  std::string address;  // IPv4 host:port; port 0: any free port
  std::string service;
  Policy policy = Policy::kP2c;
  Duration slow_start = std::chrono::seconds(30);
  double slow_start_min_percent = 10;
  HashKind hash = HashKind::kMaglev;
  double bounded_load = 1.25;
  Duration connect_timeout = std::chrono::seconds(1);
  int connect_attempts = 3;
  Duration idle_timeout = std::chrono::minutes(5);
  Duration response_timeout{};  // zero: off
  Duration key_timeout = std::chrono::seconds(5);
  Duration health_check_interval = std::chrono::seconds(2);  // zero: no active checks
  Duration health_check_timeout = std::chrono::seconds(1);
  int unhealthy_threshold = 2;
  int healthy_threshold = 1;
  int eject_after_failures = 3;
  Duration ejection = std::chrono::seconds(10);
  Duration max_ejection = std::chrono::minutes(5);
  double max_ejected_percent = 50;
};

struct GatewayConfig {
  std::string registry;
  std::string token;
  int threads = 0;  // 0: the number of cores
  std::string admin = "127.0.0.1:9900";
  Duration drain = std::chrono::seconds(10);
  std::vector<ListenerConfig> listeners;
};

std::string_view PolicyName(Policy policy);

// Parses and validates YAML text.
Result<GatewayConfig> ParseGatewayConfig(const std::string& yaml);
// Reads a file and parses it; errors name the file.
Result<GatewayConfig> LoadGatewayConfig(const std::string& path);
// The checks ParseGatewayConfig applies, for configs built in code.
Status ValidateGatewayConfig(const GatewayConfig& config);

}  // namespace drover::gateway
