// The gRPC defaults as configuration (RT-7): the seed's values, the service config a channel is
// built with, and the multi-address target that lists a service's routable instances.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "drover/grpc.h"
#include "drover/router.h"

namespace drover::grpc_defaults {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using json = nlohmann::json;

TEST(GrpcConfigTest, TheDefaultsAreTheSeedsFix) {
  const ChannelOptions c;
  EXPECT_EQ(c.keepalive_time, 60s);
  EXPECT_EQ(c.keepalive_timeout, 10s);
  EXPECT_TRUE(c.keepalive_without_calls);
  const ServerOptions s;
  EXPECT_EQ(s.keepalive_permit, 50s);  // below the client's 60 s: no too_many_pings
  EXPECT_TRUE(s.permit_without_calls);
  EXPECT_EQ(s.max_connection_age, 60s);
  EXPECT_EQ(s.max_connection_age_grace, 10s);
  EXPECT_TRUE(Validate(c).ok());
  EXPECT_TRUE(Validate(s).ok());
}

TEST(GrpcConfigTest, ServiceConfigIsRoundRobinWithARetryPolicy) {
  ChannelOptions o;
  o.service = "whoami.v1.WhoAmI";
  o.deadline = 1500ms;
  const json config = json::parse(ServiceConfigJson(o));
  EXPECT_EQ(config["loadBalancingConfig"], json::parse(R"([{"round_robin":{}}])"));
  const json& m = config["methodConfig"][0];
  EXPECT_EQ(m["name"], json::parse(R"([{"service":"whoami.v1.WhoAmI"}])"));
  EXPECT_FALSE(m.contains("timeout"));  // see ServiceConfigJson: SetDeadline sets it per call
  EXPECT_EQ(m["retryPolicy"]["maxAttempts"], 3);
  EXPECT_EQ(m["retryPolicy"]["initialBackoff"], "0.1s");
  EXPECT_EQ(m["retryPolicy"]["maxBackoff"], "1s");
  EXPECT_EQ(m["retryPolicy"]["retryableStatusCodes"], json::array({"UNAVAILABLE"}));
  // Every method when no service is named; no retry policy when retries are off.
  ChannelOptions all;
  all.retry.max_attempts = 1;
  const json c2 = json::parse(ServiceConfigJson(all));
  EXPECT_EQ(c2["methodConfig"][0]["name"], json::parse("[{}]"));
  EXPECT_FALSE(c2["methodConfig"][0].contains("retryPolicy"));
}

TEST(GrpcConfigTest, ValuesGrpcWouldChangeOrRejectAreRefused) {
  ChannelOptions c;
  c.retry.max_attempts = 6;
  EXPECT_THAT(Validate(c).message(), HasSubstr("1..5"));
  c = ChannelOptions{};
  c.retry.retryable_codes.clear();
  EXPECT_THAT(Validate(c).message(), HasSubstr("at least one retryable status code"));
  c = ChannelOptions{};
  c.keepalive_timeout = 0s;
  EXPECT_FALSE(Validate(c).ok());
  ServerOptions s;
  s.max_connection_age = 0s;
  EXPECT_FALSE(Validate(s).ok());
}

TEST(GrpcConfigTest, DurationsAreProtobufJson) {
  EXPECT_EQ(DurationJson(60s), "60s");
  EXPECT_EQ(DurationJson(100ms), "0.1s");
  EXPECT_EQ(DurationJson(1ns), "0.000000001s");
  EXPECT_EQ(DurationJson(2500ms), "2.5s");
}

router::Endpoint Instance(std::string id, std::string address, bool routable = true) {
  router::Endpoint e;
  e.id = std::move(id);
  e.address = std::move(address);
  e.state = routable ? router::EndpointState::kReady : router::EndpointState::kDraining;
  return e;
}

TEST(GrpcConfigTest, TheTargetListsEveryRoutableInstance) {
  auto table = router::RoutingTable::Create(
      7, {Instance("c", "127.0.0.1:7003"), Instance("a", "127.0.0.1:7001"),
          Instance("b", "127.0.0.1:7002", /*routable=*/false)});
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(*MultiAddressTarget(**table), "ipv4:127.0.0.1:7001,127.0.0.1:7003");
  auto v6 =
      router::RoutingTable::Create(1, {Instance("a", "[::1]:7001"), Instance("b", "[::1]:7002")});
  EXPECT_EQ(*MultiAddressTarget(**v6), "ipv6:[::1]:7001,[::1]:7002");
  // "::1:7002" could be [::1]:7002 or [::1:7002] without a port: host:port's one rule refuses it.
  auto bare = router::RoutingTable::Create(1, {Instance("b", "::1:7002")});
  EXPECT_THAT(MultiAddressTarget(**bare).status().message(), HasSubstr("goes in brackets"));
  auto mixed =
      router::RoutingTable::Create(1, {Instance("a", "127.0.0.1:1"), Instance("b", "[::1]:2")});
  EXPECT_THAT(MultiAddressTarget(**mixed).status().message(), HasSubstr("mixes IPv4 and IPv6"));
  auto named = router::RoutingTable::Create(1, {Instance("a", "worker-1.local:7001")});
  EXPECT_THAT(MultiAddressTarget(**named).status().message(), HasSubstr("not an IP address"));
  auto none = router::RoutingTable::Create(1, {Instance("a", "127.0.0.1:1", false)});
  EXPECT_EQ(MultiAddressTarget(**none).status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace drover::grpc_defaults
