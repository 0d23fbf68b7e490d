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
      // The stored form's own members are not the API's.
      {R"({"address":"a:1","generation":1,"create_revision":3})",
       "unknown field 'create_revision'"},
      {R"({"address":"a:1","generation":1,"ready_since_ms":3})", "unknown field 'ready_since_ms'"},
  };
  for (const Case& c : cases) {
    auto spec = SpecFromJson(c.body);
    ASSERT_FALSE(spec.ok()) << c.body;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument) << c.body;
    EXPECT_NE(spec.status().message().find(c.error), std::string::npos)
        << c.body << " -> " << spec.status().message();
  }
}

StoredInstance FullStoredInstance() {
  StoredInstance in;
  in.spec.address = "10.0.0.7:7000";
  in.spec.generation = 18446744073709551615u;
  in.spec.state = InstanceState::kDraining;
  in.spec.ttl_ms = 600000;
  in.spec.weight = 4294967295u;
  in.spec.zone = "zone-a";
  // What validation lets through is printable ASCII; the writer keeps anything valid JSON.
  in.spec.labels = {{"plain", "7"},
                    {"quote\"back\\slash", "line\nfeed\ttab\x01"},
                    {"caf\xc3\xa9", "\xe2\x82\xac"}};
  in.spec.version = "1.2.0";
  in.spec.accepting = false;
  in.create_revision = 123456789;
  in.ready_since_ms = 1733400000123;
  return in;
}

std::string Json(const StoredInstance& in) {
  return StoredInstanceJson(in.spec, in.create_revision, in.ready_since_ms);
}

void ExpectSame(const StoredInstance& a, const StoredInstance& b) {
  EXPECT_EQ(a.spec.address, b.spec.address);
  EXPECT_EQ(a.spec.generation, b.spec.generation);
  EXPECT_EQ(a.spec.state, b.spec.state);
  EXPECT_EQ(a.spec.ttl_ms, b.spec.ttl_ms);
  EXPECT_EQ(a.spec.weight, b.spec.weight);
  EXPECT_EQ(a.spec.zone, b.spec.zone);
  EXPECT_EQ(a.spec.labels, b.spec.labels);
  EXPECT_EQ(a.spec.version, b.spec.version);
  EXPECT_EQ(a.spec.accepting, b.spec.accepting);
  EXPECT_EQ(a.create_revision, b.create_revision);
  EXPECT_EQ(a.ready_since_ms, b.ready_since_ms);
}

TEST(JsonCodecTest, AStoredInstanceIsWrittenAsJsonAndReadBackWhole) {
  const StoredInstance in = FullStoredInstance();
  const std::string text = Json(in);
  // Valid JSON, with what a document would hold.
  const nlohmann::json doc = nlohmann::json::parse(text);
  EXPECT_EQ(doc.at("labels").at("quote\"back\\slash").get<std::string>(), "line\nfeed\ttab\x01");
  EXPECT_EQ(doc.at("generation").get<std::uint64_t>(), 18446744073709551615u);
  EXPECT_EQ(doc.at("state").get<std::string>(), "DRAINING");
  auto back = StoredInstanceFromJson(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << " in " << text;
  ExpectSame(*back, in);

  // Bytes that are not UTF-8 cannot be JSON: they are written as U+FFFD, never as broken text.
  StoredInstance odd = in;
  odd.spec.labels = {{"k", std::string("a\xff\xc3"
                                       "b")}};
  auto odd_back = StoredInstanceFromJson(Json(odd));
  ASSERT_TRUE(odd_back.ok()) << odd_back.status().ToString();
  EXPECT_EQ(odd_back->spec.labels.at("k"),
            "a\xef\xbf\xbd\xef\xbf\xbd"
            "b");

  // A time before 1970 and no labels.
  StoredInstance early = in;
  early.ready_since_ms = -5;
  early.spec.labels.clear();
  auto early_back = StoredInstanceFromJson(Json(early));
  ASSERT_TRUE(early_back.ok()) << early_back.status().ToString();
  ExpectSame(*early_back, early);
}

// What earlier versions wrote -- a document's dump, members in name order -- and what a newer
// one may write (members this one does not know, of any shape) are read alike.
TEST(JsonCodecTest, AStoredInstanceIsReadInAnyMemberOrderAndSkipsMembersItDoesNotKnow) {
  const StoredInstance in = FullStoredInstance();
  // A document keeps its members in name order, as the document writer of earlier versions did.
  nlohmann::json doc = nlohmann::json::parse(Json(in));
  ASSERT_EQ(doc.begin().key(), "accepting");
  auto sorted = StoredInstanceFromJson(doc.dump());
  ASSERT_TRUE(sorted.ok()) << sorted.status().ToString();
  ExpectSame(*sorted, in);
  // A value as an earlier version stored it, word for word.
  auto earlier = StoredInstanceFromJson(
      R"({"accepting":true,"address":"10.0.0.1:7000","create_revision":0,"generation":1,)"
      R"("labels":{"shard":"3"},"ready_since_ms":0,"state":"READY","ttl_ms":600000,)"
      R"("version":"1.0.0","weight":1,"zone":"zone-a"})");
  ASSERT_TRUE(earlier.ok()) << earlier.status().ToString();
  EXPECT_EQ(earlier->spec.address, "10.0.0.1:7000");
  EXPECT_EQ(earlier->spec.state, InstanceState::kReady);
  EXPECT_EQ(earlier->spec.labels, (std::map<std::string, std::string>{{"shard", "3"}}));
  EXPECT_TRUE(earlier->spec.accepting);
  EXPECT_EQ(earlier->create_revision, 0u);
  EXPECT_EQ(earlier->ready_since_ms, 0);

  doc["aaa_first"] = {{"nested", {1, {{"deep", nullptr}}, "x"}}, {"labels", {{"a", "b"}}}};
  doc["mid_list"] = nlohmann::json::array({nlohmann::json::object(), nlohmann::json::array()});
  doc["zz_scalar"] = -1.5;
  doc["zz_bool"] = true;
  doc["zz_null"] = nullptr;
  doc["zz_string"] = "s";
  auto newer = StoredInstanceFromJson(doc.dump());
  ASSERT_TRUE(newer.ok()) << newer.status().ToString() << " in " << doc.dump();
  ExpectSame(*newer, in);
}

TEST(JsonCodecTest, LabelsAreWrittenAsTheDocumentWriterWroteThem) {
  const std::map<std::string, std::string> labels = FullStoredInstance().spec.labels;
  std::string out = "x";
  AppendLabelsJson(out, labels);
  EXPECT_EQ(out, "x" + nlohmann::json(labels).dump());
  out.clear();
  AppendLabelsJson(out, {});
  EXPECT_EQ(out, "{}");
}

TEST(JsonCodecTest, AStoredInstanceMissingAMemberOrOfAWrongTypeIsRefusedSayingWhich) {
  const nlohmann::json whole = nlohmann::json::parse(Json(FullStoredInstance()));
  for (const auto& [name, value] : whole.items()) {
    nlohmann::json doc = whole;
    doc.erase(name);
    auto read = StoredInstanceFromJson(doc.dump());
    ASSERT_FALSE(read.ok()) << name;
    EXPECT_EQ(read.status().message(), "missing field '" + name + "'");
  }
  struct Case {
    std::string member;
    nlohmann::json value;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"create_revision", "7", "field 'create_revision' must be a non-negative integer"},
      {"create_revision", -7, "field 'create_revision' must be a non-negative integer"},
      {"ready_since_ms", 9223372036854775808u, "field 'ready_since_ms' is out of range"},
      {"ready_since_ms", 1.5, "field 'ready_since_ms' must be a non-negative integer"},
      {"labels", {{"a", 1}}, "field 'labels' must be an object of strings"},
      {"state", "ready", "state"},
  };
  for (const Case& c : cases) {
    nlohmann::json doc = whole;
    doc[c.member] = c.value;
    auto read = StoredInstanceFromJson(doc.dump());
    ASSERT_FALSE(read.ok()) << doc.dump();
    EXPECT_NE(read.status().message().find(c.error), std::string::npos)
        << doc.dump() << " -> " << read.status().message();
  }
  EXPECT_FALSE(StoredInstanceFromJson("not json").ok());
  EXPECT_FALSE(StoredInstanceFromJson("[]").ok());
}

}  // namespace
}  // namespace drover::registry
