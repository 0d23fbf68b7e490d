#include "registry/model.h"

#include <gtest/gtest.h>

#include <functional>

namespace drover::registry {
namespace {

InstanceSpec Good() {
  InstanceSpec spec;
  spec.address = "10.1.2.3:7001";
  spec.generation = 1;
  spec.labels = {{"shard", "3"}};
  spec.zone = "eu-1a";
  spec.version = "1.4.2";
  return spec;
}

TEST(ModelTest, GoodSpecAndNamesPass) {
  const Limits limits;
  EXPECT_TRUE(ValidateSpec(Good(), limits).ok());
  EXPECT_TRUE(ValidateName("service", "zone-server_v2.eu", limits).ok());
  InstanceSpec ipv6 = Good();
  ipv6.address = "[::1]:7001";
  EXPECT_TRUE(ValidateSpec(ipv6, limits).ok());
}

TEST(ModelTest, MalformedSpecsAreInvalidArgument) {
  const Limits limits;
  const std::vector<std::pair<const char*, std::function<void(InstanceSpec&)>>> cases = {
      {"empty address", [](InstanceSpec& s) { s.address = ""; }},
      {"no port", [](InstanceSpec& s) { s.address = "10.0.0.1"; }},
      {"empty port", [](InstanceSpec& s) { s.address = "10.0.0.1:"; }},
      {"port zero", [](InstanceSpec& s) { s.address = "10.0.0.1:0"; }},
      {"port too big", [](InstanceSpec& s) { s.address = "10.0.0.1:65536"; }},
      {"port not a number", [](InstanceSpec& s) { s.address = "10.0.0.1:http"; }},
      {"port with sign", [](InstanceSpec& s) { s.address = "10.0.0.1:-80"; }},
      {"no host", [](InstanceSpec& s) { s.address = ":80"; }},
      {"space in address", [](InstanceSpec& s) { s.address = "10.0.0.1 :80"; }},
      {"address too long", [](InstanceSpec& s) { s.address = std::string(300, 'a') + ":80"; }},
      {"generation zero", [](InstanceSpec& s) { s.generation = 0; }},
      {"ttl too short", [](InstanceSpec& s) { s.ttl_ms = 10; }},
      {"ttl negative", [](InstanceSpec& s) { s.ttl_ms = -5; }},
      {"ttl too long", [](InstanceSpec& s) { s.ttl_ms = 86'400'000; }},
      {"weight too big", [](InstanceSpec& s) { s.weight = 2'000'000; }},
      {"zone with space", [](InstanceSpec& s) { s.zone = "eu 1"; }},
      {"zone too long", [](InstanceSpec& s) { s.zone = std::string(100, 'z'); }},
      {"version with quote", [](InstanceSpec& s) { s.version = "1\"2"; }},
      {"control char", [](InstanceSpec& s) { s.version = std::string("1\n2"); }},
      {"empty label key", [](InstanceSpec& s) { s.labels[""] = "x"; }},
      {"label value too long", [](InstanceSpec& s) { s.labels["k"] = std::string(300, 'v'); }},
      {"too many labels",
       [](InstanceSpec& s) {
         for (int i = 0; i < 40; ++i) s.labels["k" + std::to_string(i)] = "v";
       }},
      {"non-ascii label", [](InstanceSpec& s) { s.labels["k"] = "\xc3\xa9"; }},
  };
  for (const auto& [name, mutate] : cases) {
    InstanceSpec spec = Good();
    mutate(spec);
    EXPECT_EQ(ValidateSpec(spec, limits).code(), StatusCode::kInvalidArgument) << name;
  }
}

TEST(ModelTest, BadNamesAreInvalidArgument) {
  const Limits limits;
  for (const char* name : {"", "-lead", ".hidden", "a/b", "a b", "..", "a%2F", "ü"}) {
    EXPECT_EQ(ValidateName("service", name, limits).code(), StatusCode::kInvalidArgument) << name;
  }
  EXPECT_EQ(ValidateName("id", std::string(129, 'a'), limits).code(), StatusCode::kInvalidArgument);
}

TEST(ModelTest, NamesRoundTrip) {
  for (auto s : {InstanceState::kStarting, InstanceState::kReady, InstanceState::kDraining}) {
    EXPECT_EQ(*ParseInstanceState(InstanceStateName(s)), s);
  }
  EXPECT_EQ(ParseInstanceState("ready").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RemovalReasonName(RemovalReason::kFence), "fence");
  EXPECT_EQ(EventTypeName(EventType::kResync), "RESYNC");
}

}  // namespace
}  // namespace drover::registry
