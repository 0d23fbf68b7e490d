#include "gateway/config.h"

#include <gtest/gtest.h>

namespace drover::gateway {
namespace {

using namespace std::chrono_literals;

constexpr const char* kGood = R"(
registry: 127.0.0.1:7071
threads: 2
admin: 127.0.0.1:9900
drain_ms: 5000
max_stale_ms: 45000
listeners:
  - name: zone
    address: 0.0.0.0:7000
    service: zone
    policy: p2c
    slow_start_ms: 20000
  - name: keyed
    protocol: tcp
    address: 127.0.0.1:7001
    service: zone
    policy: hash
    hash: ring
    bounded_load: 1.5
    connect_attempts: 2
    idle_timeout_ms: 60000
  - name: web
    protocol: http
    address: 127.0.0.1:8080
    upstream_max_age_ms: 30000
    upstream_idle_timeout_ms: 5000
    max_idle_per_instance: 8
    retry_budget_percent: 10
    retry_budget_min: 1
    max_header_bytes: 8192
    routes:
      - prefix: /
        service: site
      - prefix: /api/
        service: api
        policy: hash
        hash: ring
        hash_header: X-User
        response_timeout_ms: 2500
        retries: 1
)";

TEST(GatewayConfigTest, ParsesEverySetting) {
  auto c = ParseGatewayConfig(kGood);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->registry, "127.0.0.1:7071");
  EXPECT_EQ(c->threads, 2);
  EXPECT_EQ(c->cpu_affinity, "spread");  // default
  auto none = ParseGatewayConfig(std::string(kGood) + "cpu_affinity: none\n");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->cpu_affinity, "none");
  EXPECT_EQ(c->drain, 5s);
  EXPECT_EQ(c->max_stale, 45s);
  EXPECT_EQ(GatewayConfig().max_stale, 30s);  // the default
  ASSERT_EQ(c->listeners.size(), 3u);
  EXPECT_EQ(c->listeners[0].policy, Policy::kP2c);
  EXPECT_EQ(c->listeners[0].slow_start, 20s);
  EXPECT_EQ(c->listeners[0].connect_attempts, 3);  // default
  EXPECT_EQ(c->listeners[1].policy, Policy::kHash);
  EXPECT_EQ(c->listeners[1].hash, HashKind::kRing);
  EXPECT_DOUBLE_EQ(c->listeners[1].bounded_load, 1.5);
  EXPECT_EQ(c->listeners[1].idle_timeout, 60s);
  const ListenerConfig& web = c->listeners[2];
  EXPECT_EQ(web.protocol, Protocol::kHttp);
  EXPECT_EQ(web.upstream_max_age, 30s);
  EXPECT_EQ(web.upstream_idle_timeout, 5s);
  EXPECT_EQ(web.max_idle_per_instance, 8);
  EXPECT_DOUBLE_EQ(web.retry_budget_percent, 10);
  EXPECT_EQ(web.retry_budget_min, 1);
  EXPECT_EQ(web.max_header_bytes, 8192u);
  ASSERT_EQ(web.routes.size(), 2u);
  EXPECT_EQ(web.routes[0].policy, Policy::kP2c);
  EXPECT_EQ(web.routes[0].retries, 2);  // default
  EXPECT_EQ(web.routes[1].service, "api");
  EXPECT_EQ(web.routes[1].hash, HashKind::kRing);
  EXPECT_EQ(web.routes[1].hash_header, "X-User");
  EXPECT_EQ(web.routes[1].response_timeout, 2500ms);
  // A route's upstream: the listener's settings with the route's service, policy and attempts.
  const ListenerConfig api = RouteUpstreamConfig(web, web.routes[1]);
  EXPECT_EQ(api.service, "api");
  EXPECT_EQ(api.policy, Policy::kHash);
  EXPECT_EQ(api.connect_attempts, 2);
  EXPECT_EQ(api.response_timeout, 2500ms);
  EXPECT_EQ(api.upstream_max_age, 30s);
}

TEST(GatewayConfigTest, RefusesBadInputWithTheKeyInTheMessage) {
  struct Case {
    std::string yaml;
    std::string expect;
  };
  const std::string head = "registry: 127.0.0.1:7071\nlisteners:\n  - name: z\n    service: zone\n";
  const std::string http =
      "registry: 127.0.0.1:7071\nlisteners:\n  - name: w\n    protocol: http\n"
      "    address: 127.0.0.1:1\n";
  const std::string route = "    routes:\n      - service: a\n";
  const std::vector<Case> cases = {
      {"registry: [unclosed", "not valid YAML"},
      {"- a\n- b\n", "config: must be a map"},
      {"registry: r:1\nlistners: []\n", "config.listners: unknown key"},
      {"listeners:\n  - name: z\n    address: 127.0.0.1:1\n    service: s\n", "registry: required"},
      {"registry: 127.0.0.1:7071\n", "listeners: at least one"},
      {"registry: http://127.0.0.1:7071\n", "give host:port, grpc://host:port or grpcs://"},
      {"registry: grpc://127.0.0.1:7071\nregistry_ca: /ca.pem\n", "plaintext (grpc://) but a CA"},
      {head + "    address: nowhere\n", "listeners[0].address"},
      {head + "    address: 127.0.0.1:70000\n", "listeners[0].address"},
      {head + "    address: 127.0.0.1:1\n    policy: random\n", "listeners[0].policy"},
      {head + "    address: 127.0.0.1:1\n    protocol: udp\n", "listeners[0].protocol"},
      {head + "    address: 127.0.0.1:1\n    bounded_load: 0.5\n", "bounded_load"},
      {head + "    address: 127.0.0.1:1\n    connect_attempts: 0\n", "connect_attempts"},
      {head + "    address: 127.0.0.1:1\n    connect_timeout_ms: -5\n", "connect_timeout_ms"},
      {head + "    address: 127.0.0.1:1\n    idle_timeout_ms: lots\n",
       "idle_timeout_ms: wrong type"},
      {head + "    address: 127.0.0.1:1\n    colour: blue\n", "listeners[0].colour: unknown key"},
      {"cpu_affinity: pinned\n" + head + "    address: 127.0.0.1:1\n",
       "cpu_affinity: must be spread or none, got 'pinned'"},
      {head + "    address: 127.0.0.1:1\n" + route, "routes: only for protocol http"},
      {http + "    service: s\n" + route, "service: an http listener routes by routes[].service"},
      {http, "routes: at least one is required"},
      {http + "    routes:\n      - prefix: api\n        service: a\n", "routes[0].prefix"},
      {http + "    routes:\n      - service: a\n      - service: b\n", "prefix: '/' is used twice"},
      {http + "    routes:\n      - prefix: /\n", "routes[0].service: required"},
      {http + "    routes:\n      - prefix: /\n        service: a\n        policy: least_conn\n",
       "routes[0].policy: must be p2c, hash"},
      {http + "    routes:\n      - prefix: /\n        service: a\n        retries: 10\n",
       "retries: must be within 0..9"},
      {http + "    routes:\n      - prefix: /\n        service: a\n        speed: 3\n",
       "routes[0].speed: unknown key"},
      {http + "    max_header_bytes: 10\n" + route, "max_header_bytes"},
      {http + "    max_connections: 0\n" + route, "max_connections: must be within 1..10000000"},
      {http + "    retry_budget_percent: 150\n" + route, "retry_budget_percent"},
      {head +
           "    address: 127.0.0.1:1\n  - name: z\n    service: zone\n    address: 127.0.0.1:2\n",
       "used twice"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseGatewayConfig(c.yaml);
    ASSERT_FALSE(parsed.ok()) << c.yaml;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.expect), std::string::npos)
        << c.yaml << " -> " << parsed.status().message();
  }
}

TEST(GatewayConfigTest, AMissingFileIsAClearError) {
  auto c = LoadGatewayConfig("/nonexistent/gateway.yaml");
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("/nonexistent/gateway.yaml"), std::string::npos);
}

}  // namespace
}  // namespace drover::gateway
