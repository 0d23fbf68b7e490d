// The YAML files of `drover registry --config` and `drover deploy --spec`, parsed apart from the
// command line: values, flags that win, and errors that name the file and the key.
#include "config_files.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace drover::cli {
namespace {

TEST(ConfigFilesTest, ADeploySpecFillsWhatTheFlagsDidNotGive) {
  DeployArgs args;
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

TEST(ConfigFilesTest, BadDeploySpecsAndRegistryConfigsNameTheFileAndKey) {
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
    DeployArgs args;
    const Status s = ApplyDeploySpec(c.yaml, "spec.yaml", none, args);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.yaml << ": " << s.message();
  }
  for (const Case& c : std::vector<Case>{
           {"tick_ms: 1", "config r.yaml: tick_ms must be 10..60000"},
           {"store: mysql", "config r.yaml: store must be sqlite or etcd"},
           {"listen_everywhere: true", "config r.yaml: unknown key 'listen_everywhere'"},
           {"config: other.yaml", "config r.yaml: unknown key 'config'"},
           {"? [a, b]\n: 1\n", "config r.yaml: a key is not a string"},
           {"self_preservation: .nan", "self_preservation must be 0..1"},
           {"ui_agents: [ftp://x]", "must start with http:// or https://"},
       }) {
    RegistryArgs args;
    const Status s = ApplyRegistryConfig(c.yaml, "r.yaml", none, args);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.yaml << ": " << s.message();
  }
  RegistryArgs args;
  ASSERT_TRUE(ApplyRegistryConfig(
                  "tick_ms: 250\nhttp: 0.0.0.0:7070\n", "r.yaml",
                  [](std::string_view f) { return f == "--http"; }, args)
                  .ok());
  EXPECT_EQ(args.tick_ms, 250);
  EXPECT_EQ(args.http, "127.0.0.1:7070");  // the flag (here its default) won
}

}  // namespace
}  // namespace drover::cli
