// `drover deploy --spec`: the deploy spec file read apart from the command line -- values, flags
// that win, errors that name the file and the key -- and the deploy a request describes.
#include "rollout/deploy_request.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

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

}  // namespace
}  // namespace drover::rollout
