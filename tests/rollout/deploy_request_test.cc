// `drover deploy --spec`: the deploy spec file read apart from the command line -- values, flags
// that win, errors that name the file and the key -- and the deploy a request describes.
#include "rollout/deploy_request.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace drover::rollout {
namespace {

TEST(DeployRequestTest, ADeploySpecFillsWhatTheFlagsDidNotGive) {
  DeployRequest args;
  args.instances = 5;  // as if --instances 5 was given
  const std::set<std::string> given = {"--instances"};
  const Status s = ApplyDeploySpec(
      R"(
service: zone
version: v2
command: [drover, sample, zone, --id, "{id}"]
env: {A: "1", B: two}
instances: 3
registry: https://registry.example:7070
registry_ca: /etc/drover/ca.pem
min_healthy_ms: 3000
)",
      "spec.yaml", [&](std::string_view f) { return given.count(std::string(f)); }, args);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(args.service, "zone");
  EXPECT_EQ(args.version, "v2");
  EXPECT_EQ(args.command.size(), 5u);
  EXPECT_EQ(args.env, (std::vector<std::string>{"A=1", "B=two"}));
  EXPECT_EQ(args.instances, 5);  // the flag won
  EXPECT_EQ(args.registry_ca, "/etc/drover/ca.pem");
  EXPECT_EQ(args.min_healthy_ms, 3000);
}

TEST(DeployRequestTest, BadDeploySpecsNameTheFileAndKey) {
  const auto none = [](std::string_view) { return false; };
  struct Case {
    std::string yaml;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {"[1, 2]", "spec.yaml: expected a mapping"},
           {"service: [unclosed", "spec.yaml: not valid YAML"},
           {"colour: blue", "spec.yaml: unknown key 'colour'"},
           {"instances: many", "spec.yaml: bad value for 'instances'"},
           {"env: [a, b]", "spec.yaml: env must be a mapping"},
           {"? [a, b]\n: 1\n", "spec.yaml: a key is not a string"},
       }) {
    DeployRequest args;
    const Status s = ApplyDeploySpec(c.yaml, "spec.yaml", none, args);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.yaml << ": " << s.message();
  }
}

TEST(DeployRequestTest, TheSpecOfARequestSaysWhatIsMissing) {
  DeployRequest r;
  EXPECT_EQ(DeploySpecOf(r).status().message(), "which service? (SERVICE or `service:` in --spec)");
  r.service = "zone";
  EXPECT_EQ(DeploySpecOf(r).status().message(), "--version is required");
  r.version = "v2";
  EXPECT_EQ(DeploySpecOf(r).status().message(),
            "no command: give it after -- or as `command:` in --spec");
  r.command = {"zone_server", "--id", "{id}"};
  r.env = {"COLOUR"};
  EXPECT_EQ(DeploySpecOf(r).status().message(), "--env wants KEY=VALUE, got 'COLOUR'");
  r.env = {"COLOUR=blue", "EMPTY="};
  r.instances = 3;
  r.min_healthy_ms = 2000;
  r.check_delay_ms = 1000;
  auto spec = DeploySpecOf(r);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->service, "zone");
  EXPECT_EQ(spec->instances, 3);
  EXPECT_EQ(spec->env, (std::map<std::string, std::string>{{"COLOUR", "blue"}, {"EMPTY", ""}}));
  EXPECT_EQ(spec->gate.min_healthy, std::chrono::milliseconds(2000));
}

TEST(DeployRequestTest, TheFleetStrategyComesFromTheSpecOrTheFlags) {
  DeployRequest args;
  const Status s = ApplyDeploySpec(
      R"(
service: zone
version: v2
command: [zone]
instances: 6
agents: zone=eu-1
max_surge: 50%
max_unavailable: "1"
canary: "1"
canary_pause_ms: 30000
drain_delay_ms: 1500
host_timeout_ms: 4000
controller_lease_ms: 6000
)",
      "spec.yaml", [](std::string_view) { return false; }, args);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(args.agents, "zone=eu-1");
  const auto spec = DeploySpecOf(args);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->max_surge, (Amount{50, true}));
  EXPECT_EQ(spec->max_unavailable, (Amount{1, false}));
  ASSERT_TRUE(spec->canary.has_value());
  EXPECT_EQ(spec->canary_pause, std::chrono::seconds(30));
  EXPECT_EQ(spec->drain_delay, std::chrono::milliseconds(1500));
  EXPECT_EQ(spec->host_timeout, std::chrono::seconds(4));
  EXPECT_EQ(spec->controller_lease, std::chrono::seconds(6));
  // The stored spec is the spec: a resuming controller reads back what this one ran.
  EXPECT_EQ(DeploySpecToJson(DeploySpecFromJson(DeploySpecToJson(*spec)).value()),
            DeploySpecToJson(*spec));

  // An agent list in the file: one URL or several.
  DeployRequest listed;
  ASSERT_TRUE(ApplyDeploySpec(
                  "agent: [http://10.0.0.2:7080, http://10.0.0.3:7080]\n", "s.yaml",
                  [](std::string_view) { return false; }, listed)
                  .ok());
  EXPECT_EQ(listed.agent.size(), 2u);

  for (const auto& [surge, unavailable, canary, why] :
       std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
           {"0", "0", "", "are both 0"},
           {"150%", "0", "", "--max-surge is '150%'"},
           {"1", "x", "", "--max-unavailable is 'x'"},
           {"1", "0", "6", "is all of them"}}) {
    DeployRequest bad = args;
    bad.max_surge = surge;
    bad.max_unavailable = unavailable;
    bad.canary = canary;
    const auto refused = DeploySpecOf(bad);
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << why;
    EXPECT_NE(refused.status().message().find(why), std::string::npos)
        << refused.status().message();
  }
  DeployRequest both = args;
  both.agent = {"http://10.0.0.2:7080"};
  EXPECT_NE(DeploySpecOf(both).status().message().find("not both"), std::string::npos);
}

}  // namespace
}  // namespace drover::rollout
