// The fleet across machines, on one machine: each "host" is a `drover agent` on its own loopback
// address (127.0.0.2, 127.0.0.3, 127.0.0.4), registered in a real registry as service
// drover-agent; instances bind and advertise their host's address ("{host}"), never 127.0.0.1.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/http_client.h"
#include "testing/port_in.h"
#include "testing/registry_process.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::ChildProcess;
using drover::testing::Eventually;
using json = nlohmann::json;

const std::vector<std::string> kHosts = {"127.0.0.2", "127.0.0.3", "127.0.0.4"};

struct Agent {
  std::string host;
  std::uint16_t port = 0;
  std::unique_ptr<ChildProcess> process;
};

class FleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = drover::testing::StartRegistryProcess(
        DROVER_BINARY, {"--data-dir", dir_.path() + "/registry", "--http", "127.0.0.1:0", "--grpc",
                        "127.0.0.1:0", "--tick-ms", "100"});
    ASSERT_NE(registry_.http, 0) << registry_.line;
    for (std::size_t i = 0; i < kHosts.size(); ++i) StartAgent(i);
  }

  void StartAgent(std::size_t i) {
    Agent& a = agents_[i];
    a.host = kHosts[i];
    a.process = std::make_unique<ChildProcess>(std::vector<std::string>{
        DROVER_BINARY, "--log-level", "warn", "agent", "--data-dir",
        dir_.path() + "/agent-" + a.host, "--listen", a.host + ":0", "--registry",
        registry_.grpc_address(), "--zone", "zone-" + std::to_string(i % 2), "--capacity", "8"});
    const auto line = a.process->ReadLine(20s);
    ASSERT_TRUE(line.has_value());
    a.port = drover::testing::PortIn(*line, "http://" + std::string(a.host) + R"(:(\d+))");
    ASSERT_NE(a.port, 0) << *line;
  }

  // The registry's instances of `service`, by id.
  std::map<std::string, json> Instances(const std::string& service) {
    const auto reply =
        drover::testing::Http(registry_.http, "GET", "/v1/services/" + service + "/instances");
    std::map<std::string, json> out;
    const json body = json::parse(reply.body, nullptr, false);
    if (reply.status != 200 || body.is_discarded()) return out;
    for (const json& i : body["instances"]) out[i["id"].get<std::string>()] = i;
    return out;
  }

  drover::testing::TempDir dir_;
  drover::testing::RegistryProcess registry_;
  std::map<std::size_t, Agent> agents_;
};

TEST_F(FleetTest, AgentsRegisterAsHostsAndInstancesBindTheirHostsAddress) {
  std::map<std::string, json> agents;
  ASSERT_TRUE(Eventually(
      [&] {
        agents = Instances("drover-agent");
        return agents.size() == kHosts.size();
      },
      20s))
      << agents.size() << " agents registered";
  for (const auto& [i, a] : agents_) {
    const std::string name = "agent-" + a.host + "-" + std::to_string(a.port);
    ASSERT_EQ(agents.count(name), 1u) << name;
    const json& entry = agents[name];
    EXPECT_EQ(entry["address"], a.host + ":" + std::to_string(a.port));
    EXPECT_EQ(entry["state"], "READY");
    EXPECT_EQ(entry["zone"], "zone-" + std::to_string(i % 2));
    EXPECT_EQ(entry["labels"]["host"], a.host);
    EXPECT_EQ(entry["labels"]["scheme"], "http");
    EXPECT_EQ(entry["labels"]["capacity"], "8");
  }

  // A zone server started through the agent on 127.0.0.3 listens, and is registered, there.
  const Agent& host3 = agents_[1];
  const json launch = {{"service", "zone"},
                       {"id", "zone-v1-1"},
                       {"version", "v1"},
                       {"argv",
                        {DROVER_BINARY, "sample", "zone", "--registry", registry_.grpc_address(),
                         "--id", "{id}", "--warmup-ms", "0", "--listen", "{host}:{port}",
                         "--health", "{host}:{health_port}", "--log-level", "warn"}}};
  const auto started =
      drover::testing::HttpTo(host3.host, host3.port, "POST", "/v1/instances", launch.dump());
  ASSERT_EQ(started.status, 200) << started.body;
  std::map<std::string, json> zone;
  ASSERT_TRUE(Eventually(
      [&] {
        zone = Instances("zone");
        return zone.count("zone-v1-1") == 1 && zone["zone-v1-1"]["state"] == "READY";
      },
      20s));
  const std::string address = zone["zone-v1-1"]["address"];
  EXPECT_EQ(address.rfind("127.0.0.3:", 0), 0u) << address;
  EXPECT_EQ(zone["zone-v1-1"]["labels"]["drover.health"].get<std::string>().rfind("127.0.0.3:", 0),
            0u);

  // An agent that stops leaves discovery at once, not when its lease runs out.
  agents_[0].process->Signal(SIGTERM);
  EXPECT_EQ(agents_[0].process->Wait(), 0);
  EXPECT_EQ(Instances("drover-agent").size(), kHosts.size() - 1);
}

}  // namespace
