// What only the host running an instance can fill in: free ports from below the kernel's
// ephemeral range, and the host's own address.
#include "rollout/host_ports.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>

namespace drover::rollout {
namespace {

LaunchSpec ZoneSpec() {
  LaunchSpec spec;
  spec.service = "zone";
  spec.id = "zone-v1-1";
  spec.version = "v1";
  spec.argv = {"/bin/zone",           "--id", "{id}", "--listen", "{host}:{port}", "--health",
               "{host}:{health_port}"};
  spec.env = {{"ZONE_PORT", "{port}"}, {"ZONE_HOST", "{host}"}};
  return spec;
}

TEST(HostPortsTest, EachInstanceGetsItsOwnPortsAndTheHostsAddress) {
  PortPicker ports("127.0.0.3");
  std::set<std::string> seen;
  for (int n = 0; n < 2; ++n) {
    const LaunchSpec s = FillHostPlaceholders(ZoneSpec(), "127.0.0.3", ports);
    EXPECT_EQ(s.argv[2], "{id}");  // the supervisor's to fill at each start
    const std::regex address(R"(127\.0\.0\.3:([1-9][0-9]*))");
    std::smatch port, health;
    ASSERT_TRUE(std::regex_match(s.argv[4], port, address)) << s.argv[4];
    ASSERT_TRUE(std::regex_match(s.argv[6], health, address)) << s.argv[6];
    EXPECT_EQ(s.env.at("ZONE_PORT"), port[1].str());
    EXPECT_EQ(s.env.at("ZONE_HOST"), "127.0.0.3");
    seen.insert(port[1].str());
    seen.insert(health[1].str());
  }
  EXPECT_EQ(seen.size(), 4u);  // two instances, two ports each, all distinct
}

TEST(HostPortsTest, ASpecWithoutPlaceholdersIsLeftAlone) {
  PortPicker ports;
  LaunchSpec spec = ZoneSpec();
  spec.argv = {"/bin/zone", "--listen", "127.0.0.1:9000"};
  spec.env.clear();
  EXPECT_EQ(FillHostPlaceholders(spec, "127.0.0.1", ports), spec);
}

// A port from the kernel's ephemeral range can be taken by any port-0 bind or outgoing
// connection on the host before the instance binds it (after its warm-up, and at every restart),
// and the instance then crash-loops on EADDRINUSE: the chaos test's agent restart showed it.
TEST(HostPortsTest, PortsComeFromBelowTheKernelsEphemeralRange) {
  int first = 0, last = 0;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  ASSERT_TRUE(range >> first >> last);
  if (first <= 21000) GTEST_SKIP() << "no window below an ephemeral range starting at " << first;
  PortPicker ports;
  for (int n = 0; n < 50; ++n) {
    const int port = ports.Next();
    EXPECT_GE(port, 20000);
    EXPECT_LT(port, first) << port << " is in the ephemeral range " << first << "-" << last;
  }
}

}  // namespace
}  // namespace drover::rollout
