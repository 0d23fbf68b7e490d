// `drover gateway` as a process: config file in, routing line out, a player and an HTTP request
// served through it, clean exit on SIGTERM, exit 2 with the key's path on a bad config.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <fstream>
#include <regex>

#include "testing/child_process.h"
#include "testing/http_client.h"
#include "testing/line_client.h"
#include "testing/port_in.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::ChildProcess;
using drover::testing::PortIn;

TEST(GatewayCliTest, RoutesPlayersAndExitsCleanlyOnSigterm) {
  drover::testing::TempDir dir;
  ChildProcess registry({DROVER_BINARY, "registry", "--data-dir", dir.path() + "/r", "--http",
                         "127.0.0.1:0", "--grpc", "127.0.0.1:0"});
  const auto reg = registry.ReadLine(20s);
  ASSERT_TRUE(reg.has_value());
  const std::string grpc =
      "127.0.0.1:" + std::to_string(PortIn(*reg, R"(grpc://127\.0\.0\.1:(\d+))"));
  const std::uint16_t registry_http = PortIn(*reg, R"(http://127\.0\.0\.1:(\d+))");
  ChildProcess zone({ZONE_SERVER_BINARY, "--registry", grpc, "--id", "z1", "--warmup-ms", "0",
                     "--health", "127.0.0.1:0"});
  const auto zone_line = zone.ReadLine(20s);
  ASSERT_TRUE(zone_line.has_value());
  ASSERT_TRUE(zone.ReadLine(20s).has_value());
  // The HTTP upstream: the zone server's own probe server, registered by hand as service
  // "probes" through the registry's HTTP API.
  const std::uint16_t probe_port = PortIn(*zone_line, R"(http://127\.0\.0\.1:(\d+)/ready)");
  ASSERT_NE(probe_port, 0) << *zone_line;
  const auto put = drover::testing::Http(registry_http, "PUT", "/v1/services/probes/instances/p1",
                                         R"({"address":"127.0.0.1:)" + std::to_string(probe_port) +
                                             R"(","generation":1,"state":"READY","ttl_ms":60000})");
  ASSERT_EQ(put.status, 200) << put.body;

  const std::string config = dir.path() + "/gateway.yaml";
  std::ofstream(config) << "registry: " << grpc << "\nthreads: 1\nadmin: 127.0.0.1:0\n"
                        << "listeners:\n  - name: zone\n    address: 127.0.0.1:0\n"
                        << "    service: zone\n"
                        << "  - name: web\n    protocol: http\n    address: 127.0.0.1:0\n"
                        << "    routes:\n      - prefix: /\n        service: probes\n";
  ChildProcess gateway({DROVER_BINARY, "gateway", "--config", config});
  const auto line = gateway.ReadLine(20s);
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("(service zone, p2c)"), std::string::npos) << *line;
  EXPECT_NE(line->find("admin http://127.0.0.1:"), std::string::npos) << *line;
  const std::uint16_t port = PortIn(*line, R"(zone=127\.0\.0\.1:(\d+))");
  ASSERT_NE(port, 0) << *line;
  std::optional<std::string> welcome;
  for (int i = 0; i < 200 && welcome != "WELCOME z1"; ++i) {  // until discovery has z1
    welcome = drover::testing::LineClient(port).Ask("HELLO ann");
    if (welcome != "WELCOME z1") std::this_thread::sleep_for(25ms);
  }
  EXPECT_EQ(welcome, "WELCOME z1");
  EXPECT_NE(line->find("(http, / -> probes p2c)"), std::string::npos) << *line;
  const std::uint16_t web = PortIn(*line, R"(web=127\.0\.0\.1:(\d+))");
  ASSERT_NE(web, 0) << *line;
  drover::testing::HttpReply ready;
  for (int i = 0; i < 200 && ready.status != 200; ++i) {  // until discovery has p1
    ready = drover::testing::Http(web, "GET", "/ready");
    if (ready.status != 200) std::this_thread::sleep_for(25ms);
  }
  EXPECT_EQ(ready.status, 200) << ready.body;
  EXPECT_EQ(ready.body, "ready\n");
  gateway.Signal(SIGTERM);
  const int status = gateway.Wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(GatewayCliTest, ABadConfigExitsWithTwoAndNamesTheKey) {
  drover::testing::TempDir dir;
  const std::string config = dir.path() + "/gateway.yaml";
  std::ofstream(config) << "registry: 127.0.0.1:1\nlisteners:\n  - name: z\n"
                        << "    address: 127.0.0.1:0\n    service: zone\n    policy: fastest\n";
  const auto run =
      drover::testing::RunCommand(std::string(DROVER_BINARY) + " gateway --config " + config);
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_NE(run.out.find("listeners[0].policy: must be p2c, hash or least_conn"), std::string::npos)
      << run.out;
}

}  // namespace
