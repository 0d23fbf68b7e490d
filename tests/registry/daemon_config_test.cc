// `drover registry --config`: the daemon's settings from YAML, read apart from the command line
// -- values, flags that win, errors that name the file and the key.
#include "registry/daemon_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace drover::registry {
namespace {

TEST(DaemonConfigTest, BadConfigsNameTheFileAndKeyAndFlagsWin) {
  const auto none = [](std::string_view) { return false; };
  struct Case {
    std::string yaml;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {"tick_ms: 1", "config r.yaml: tick_ms must be 10..60000"},
           {"store: mysql", "config r.yaml: store must be sqlite or etcd"},
           {"listen_everywhere: true", "config r.yaml: unknown key 'listen_everywhere'"},
           {"config: other.yaml", "config r.yaml: unknown key 'config'"},
           {"? [a, b]\n: 1\n", "config r.yaml: a key is not a string"},
           {"self_preservation: .nan", "self_preservation must be 0..1"},
           {"ui_agents: [ftp://x]", "must start with http:// or https://"},
           {"dns_ttl: 90000", "config r.yaml: dns_ttl must be 0..86400"},
           {"xds_allow: [10.0.0.0/99]",
            "config r.yaml: xds_allow '10.0.0.0/99' has a prefix length"},
           {"xds_max_streams: 0", "config r.yaml: xds_max_streams must be >= 1, got 0"},
           // One key per message, naming the value.
           {"max_body: 100", "config r.yaml: max_body must be >= 1024, got 100"},
           {"write_burst: -1", "config r.yaml: write_burst must be >= 0, got -1"},
       }) {
    DaemonOptions args;
    const Status s = ApplyDaemonConfig(c.yaml, "r.yaml", none, args);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.yaml << ": " << s.message();
  }
  DaemonOptions args;
  ASSERT_TRUE(ApplyDaemonConfig(
                  "tick_ms: 250\nhttp: 0.0.0.0:7070\n", "r.yaml",
                  [](std::string_view f) { return f == "--http"; }, args)
                  .ok());
  EXPECT_EQ(args.tick_ms, 250);
  EXPECT_EQ(args.http, "127.0.0.1:7070");  // the flag (here its default) won
  ASSERT_TRUE(ApplyDaemonConfig("dns: 127.0.0.1:8600\ndns_domain: fleet.internal\ndns_ttl: 5\n",
                                "r.yaml", none, args)
                  .ok());
  EXPECT_EQ(args.dns, "127.0.0.1:8600");
  EXPECT_EQ(args.dns_domain, "fleet.internal");
  EXPECT_EQ(args.dns_ttl_s, 5u);
  ASSERT_TRUE(ApplyDaemonConfig("xds: 127.0.0.1:18000\nxds_allow: [10.0.0.0/8, 127.0.0.1]\n"
                                "xds_max_streams_per_client: 4\n",
                                "r.yaml", none, args)
                  .ok());
  EXPECT_EQ(args.xds, "127.0.0.1:18000");
  EXPECT_EQ(args.xds_allow, "10.0.0.0/8,127.0.0.1");
  EXPECT_EQ(args.xds_max_streams_per_client, 4u);
}

}  // namespace
}  // namespace drover::registry
