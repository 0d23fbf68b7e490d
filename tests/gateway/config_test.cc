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
)";

TEST(GatewayConfigTest, ParsesEverySetting) {
  auto c = ParseGatewayConfig(kGood);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->registry, "127.0.0.1:7071");
  EXPECT_EQ(c->threads, 2);
  EXPECT_EQ(c->drain, 5s);
  ASSERT_EQ(c->listeners.size(), 2u);
  EXPECT_EQ(c->listeners[0].policy, Policy::kP2c);
  EXPECT_EQ(c->listeners[0].slow_start, 20s);
  EXPECT_EQ(c->listeners[0].connect_attempts, 3);  // default
  EXPECT_EQ(c->listeners[1].policy, Policy::kHash);
  EXPECT_EQ(c->listeners[1].hash, HashKind::kRing);
  EXPECT_DOUBLE_EQ(c->listeners[1].bounded_load, 1.5);
  EXPECT_EQ(c->listeners[1].idle_timeout, 60s);
}

TEST(GatewayConfigTest, RefusesBadInputWithTheKeyInTheMessage) {
  struct Case {
    std::string yaml;
    std::string expect;
  };
  const std::string head = "registry: 127.0.0.1:7071\nlisteners:\n  - name: z\n    service: zone\n";
  const std::vector<Case> cases = {
      {"registry: [unclosed", "not valid YAML"},
      {"- a\n- b\n", "config: must be a map"},
      {"registry: r:1\nlistners: []\n", "config.listners: unknown key"},
      {"listeners:\n  - name: z\n    address: 127.0.0.1:1\n    service: s\n", "registry: required"},
      {"registry: 127.0.0.1:7071\n", "listeners: at least one"},
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
