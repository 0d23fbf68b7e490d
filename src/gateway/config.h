// clang-format off
// The gateway's configuration: listeners, each bound to one service with a routing policy (tcp)
// or routing HTTP requests by path prefix to services (http).
//
//   registry: 127.0.0.1:7071        # gRPC address of the registry; grpcs://host:port for TLS;
//                                   # several of one cluster: "a:7071,b:7071" or a YAML list
//   registry_ca: /etc/drover/ca.pem # CA of the registry's certificate (implies TLS)
//   token: ...                      # bearer token, if the registry wants one (to register
//                                   # itself it needs write rights on drover-gateway)
//   name: gw-1                      # instance id in service drover-gateway (default below)
//   advertise: 10.0.0.4:9900        # admin address others reach (default: `admin`)
//   register: true                  # register as drover-gateway while admin is on
//   threads: 2                      # io threads (default: the number of cores)
//   cpu_affinity: spread            # spread: each io thread on its own share of the CPUs the
//                                   # process may use, none sharing one (only with at least as
//                                   # many CPUs as threads); none: wherever the kernel puts them
//   admin: 127.0.0.1:9900           # /metrics, /admin/snapshot, /live, /ready ("" disables)
//   drain_ms: 10000                 # graceful shutdown: sessions may finish for this long
//   listeners:
//     - name: zone
//       protocol: tcp
//       address: 0.0.0.0:7000
//       service: zone
//       policy: p2c                 # p2c (least of two, slow start) | hash | least_conn
//       slow_start_ms: 30000        # p2c: weight ramps from slow_start_min_percent to 100%
//       slow_start_min_percent: 10
//       hash: maglev                # hash: maglev | ring; the key is the first line (below)
//       bounded_load: 1.25          # hash: no instance takes more than c x its fair share
//       hot_key_fraction: 0         # hash: a key above this share of the traffic is hot (0: off)
//       hot_key_owners: 3           # hash: a hot key's sessions spread over its first N owners
//       migration_steps: 4          # hash: keys move to new instances in N steps (1: at once),
//       migration_step_ms: 1000     #   one step every this long
//       connect_timeout_ms: 1000
//       connect_attempts: 3         # distinct instances tried before the client is closed,
//                                   # each further one within the retry budget (below)
//       idle_timeout_ms: 300000     # no byte either way for this long: both sides closed
//       response_timeout_ms: 0      # upstream silent this long after client data: closed
//       key_timeout_ms: 5000        # hash: time allowed for the key line
//       health_check_interval_ms: 2000, health_check_timeout_ms: 1000,
//       unhealthy_threshold: 2, healthy_threshold: 1          # active GET /ready checks
//       eject_after_failures: 3, ejection_ms: 10000, max_ejection_ms: 300000,
//       max_ejected_percent: 50                               # passive outlier ejection
//       max_connections: 10000      # client connections open at once; more are closed at
//                                   # once (http: answered 503 first)
//     - name: web
//       protocol: http
//       address: 0.0.0.0:8080
//       idle_timeout_ms: 60000             # client keep-alive connection idle: closed
//       upstream_max_age_ms: 60000         # pooled upstream connection retired after ~this (+-10%)
//       upstream_idle_timeout_ms: 30000    # pooled upstream connection unused this long: closed
//       max_idle_per_instance: 128         # pooled idle connections kept per instance
//       retry_budget_percent: 20           # retries in flight <= max(min, percent x requests);
//       retry_budget_min: 3                # tcp listeners too: connects to a further instance
//                                          # <= max(min, percent x dials in flight)
//       max_header_bytes: 16384            # a larger request head is answered 431
//       routes:                            # longest prefix wins; a path matching none: 404
//         - prefix: /api/
//           service: api
//           policy: p2c                    # p2c | hash
//           hash_header: X-Route-Key       # hash: the key; a request without it is spread evenly
//           response_timeout_ms: 15000     # request sent -> response head received, else 504
//           retries: 2                     # further instances tried (see http_proxy.h)
//       (health checks, ejection, slow start, connect_timeout_ms and bounded_load as for tcp,
//        shared by every route of the listener)
// clang-format on
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
enum class Protocol { kTcp, kHttp };

// One HTTP route: requests whose path starts with `prefix` go to `service`.
struct RouteConfig {
  std::string prefix = "/";
  std::string service;
  Policy policy = Policy::kP2c;  // p2c or hash
  HashKind hash = HashKind::kMaglev;
  std::string hash_header = "X-Route-Key";
  Duration response_timeout = std::chrono::seconds(15);
  int retries = 2;
};

struct ListenerConfig {
  std::string name;
  Protocol protocol = Protocol::kTcp;
  std::string address;  // IPv4 host:port; port 0: any free port
  std::string service;  // tcp
  Policy policy = Policy::kP2c;
  Duration slow_start = std::chrono::seconds(30);
  double slow_start_min_percent = 10;
  HashKind hash = HashKind::kMaglev;
  double bounded_load = 1.25;
  // hash: hot keys (drover/hot_keys.h, HotKeyPolicy) -- a key above this share of the recent
  // keyed traffic is spread over its first hot_key_owners owners in the ring/Maglev order; 0: off.
  double hot_key_fraction = 0;
  int hot_key_owners = 3;
  // hash: staged key migration (drover/router/migration.h) -- when instances join, keys move to
  // their new owners in this many steps, one every migration_step (each a new table); keys whose
  // owner left move at once. 1: every key at once.
  int migration_steps = 4;
  Duration migration_step = std::chrono::seconds(1);
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
  // http
  std::vector<RouteConfig> routes;
  Duration upstream_max_age = std::chrono::seconds(60);  // zero: no limit
  Duration upstream_idle_timeout = std::chrono::seconds(30);
  int max_idle_per_instance = 128;
  double retry_budget_percent = 20;
  int retry_budget_min = 3;
  std::size_t max_header_bytes = 16 * 1024;
  std::size_t max_connections = 10'000;  // client connections at once; more are refused
};

// The settings an HTTP route's Upstream works with: the listener's, with the route's service,
// policy and timeouts (connect_attempts = 1 + retries).
ListenerConfig RouteUpstreamConfig(const ListenerConfig& listener, const RouteConfig& route);

struct GatewayConfig {
  std::string registry;
  std::string registry_ca;
  std::string token;
  int threads = 0;  // 0: the number of cores
  // "spread": the io threads on disjoint shares of the allowed CPUs (common/cpu_affinity.h);
  // "none": no affinity set.
  std::string cpu_affinity = "spread";
  std::string admin = "127.0.0.1:9900";
  Duration drain = std::chrono::seconds(10);
  // Staleness policy: a listener whose registry has not been heard for longer than this still
  // routes on its last table, but the gateway's /ready turns 503 (a load balancer in front
  // prefers another gateway). 0: never; else at least 10 s (an idle registry confirms the table
  // every 5 s).
  Duration max_stale = std::chrono::seconds(30);
  std::vector<ListenerConfig> listeners;
  // Registration as service drover-gateway (the dashboard finds the gateway there), while the
  // admin endpoint is on: `name` is the instance id (default gateway-<host>-<admin port>),
  // `advertise` the admin address others reach (default: the admin address; on 0.0.0.0, this
  // host's first non-loopback IPv4 address).
  bool register_self = true;
  std::string name;
  std::string advertise;
};

std::string_view PolicyName(Policy policy);
std::string_view ProtocolName(Protocol protocol);

// Parses and validates YAML text.
Result<GatewayConfig> ParseGatewayConfig(const std::string& yaml);
// Reads a file and parses it; errors name the file.
Result<GatewayConfig> LoadGatewayConfig(const std::string& path);
// The checks ParseGatewayConfig applies, for configs built in code.
Status ValidateGatewayConfig(const GatewayConfig& config);

}  // namespace drover::gateway
