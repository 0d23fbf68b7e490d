#include "registry/json_codec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace drover::registry {
namespace {

TEST(JsonCodecTest, ASpecIsReadWithEveryMemberAndTheDefaultsForTheRest) {
  auto full = SpecFromJson(
      R"({"address":"10.0.0.7:7000","generation":3,"state":"READY","ttl_ms":600000,)"
      R"("weight":5,"zone":"zone-a","labels":{"shard":"7","tier":"gold"},"version":"1.2.0",)"
      R"("accepting":false})");
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->address, "10.0.0.7:7000");
  EXPECT_EQ(full->generation, 3u);
  EXPECT_EQ(full->state, InstanceState::kReady);
  EXPECT_EQ(full->ttl_ms, 600000);
  EXPECT_EQ(full->weight, 5u);
  EXPECT_EQ(full->zone, "zone-a");
  EXPECT_EQ(full->labels, (std::map<std::string, std::string>{{"shard", "7"}, {"tier", "gold"}}));
  EXPECT_EQ(full->version, "1.2.0");
  EXPECT_FALSE(full->accepting);

  auto minimal = SpecFromJson(R"( { "generation" : 1, "address" : "a:1" } )");
  ASSERT_TRUE(minimal.ok()) << minimal.status().ToString();
  InstanceSpec defaults;
  defaults.address = "a:1";
  defaults.generation = 1;
  EXPECT_EQ(*minimal, defaults);  // STARTING, 10 s lease, weight 1, accepting, no labels

  // A member given twice counts as its last value, labels included (as a JSON document reads).
  auto twice =
      SpecFromJson(R"({"address":"a:1","generation":1,"zone":"x","zone":"y","labels":{"a":"1"},)"
                   R"("labels":{"b":"2","b":"3"}})");
  ASSERT_TRUE(twice.ok()) << twice.status().ToString();
  EXPECT_EQ(twice->zone, "y");
  EXPECT_EQ(twice->labels, (std::map<std::string, std::string>{{"b", "3"}}));
}

TEST(JsonCodecTest, ASpecThatIsNotAsTheAPISaysIsRefusedSayingWhy) {
  struct Case {
    std::string body, error;
  };
  const std::vector<Case> cases = {
      {"", "body is not valid JSON"},
      {"{nope", "body is not valid JSON"},
      {R"({"address":"a:1","generation":1} trailing)", "body is not valid JSON"},
      {"[1,2]", "body must be a JSON object"},
      {"17", "body must be a JSON object"},
      {R"("text")", "body must be a JSON object"},
      {"null", "body must be a JSON object"},
      {R"({"generation":1})", "missing field 'address'"},
      {R"({"address":"a:1"})", "missing field 'generation'"},
      {R"({"address":"a:1","generation":1,"colour":"red"})", "unknown field 'colour'"},
      {R"({"address":1,"generation":1})", "field 'address' must be a string"},
      {R"({"address":null,"generation":1})", "field 'address' must be a string"},
      {R"({"address":["a:1"],"generation":1})", "field 'address' must be a string"},
      {R"({"address":"a:1","generation":"1"})",
       "field 'generation' must be a non-negative integer"},
      {R"({"address":"a:1","generation":-1})", "field 'generation' must be a non-negative integer"},
      {R"({"address":"a:1","generation":1.5})",
       "field 'generation' must be a non-negative integer"},
      {R"({"address":"a:1","generation":{}})", "field 'generation' must be a non-negative integer"},
      {R"({"address":"a:1","generation":1,"ttl_ms":9223372036854775808})",
       "field 'ttl_ms' is out of range"},
      {R"({"address":"a:1","generation":1,"weight":4294967296})", "field 'weight' is out of range"},
      {R"({"address":"a:1","generation":1,"accepting":"yes"})",
       "field 'accepting' must be true or false"},
      {R"({"address":"a:1","generation":1,"state":"ready"})", "state"},
      {R"({"address":"a:1","generation":1,"state":7})", "field 'state' must be a string"},
      {R"({"address":"a:1","generation":1,"labels":"a=b"})",
       "field 'labels' must be an object of strings"},
      {R"({"address":"a:1","generation":1,"labels":["a"]})",
       "field 'labels' must be an object of strings"},
      {R"({"address":"a:1","generation":1,"labels":{"a":1}})",
       "field 'labels' must be an object of strings"},
      {R"({"address":"a:1","generation":1,"labels":{"a":{"b":"c"}}})",
       "field 'labels' must be an object of strings"},
      {R"({"address":"a:1","generation":1,"labels":{"a":null}})",
       "field 'labels' must be an object of strings"},
  };
  for (const Case& c : cases) {
    auto spec = SpecFromJson(c.body);
    ASSERT_FALSE(spec.ok()) << c.body;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument) << c.body;
    EXPECT_NE(spec.status().message().find(c.error), std::string::npos)
        << c.body << " -> " << spec.status().message();
  }
}

}  // namespace
}  // namespace drover::registry
