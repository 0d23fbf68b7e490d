// The README's "zone server by hand" as a test: real `drover registry` and `zone_server`
// processes on loopback, driven with signals and real sockets.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/http_client.h"
#include "testing/line_client.h"
#include "testing/port_in.h"
#include "testing/registry_process.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace drover {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::LineClient;
using testing::PortIn;

class ZoneServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = drover::testing::StartRegistryProcess(
        DROVER_BINARY,
        {"--data-dir", dir_.path(), "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"});
    http_port_ = registry_.http;
    grpc_port_ = registry_.grpc;
    ASSERT_NE(http_port_, 0) << registry_.line;
    ASSERT_NE(grpc_port_, 0) << registry_.line;
  }

  std::unique_ptr<ChildProcess> Zone(const std::string& id, std::vector<std::string> extra) {
    std::vector<std::string> argv{
        ZONE_SERVER_BINARY, "--registry", "127.0.0.1:" + std::to_string(grpc_port_), "--id", id,
        "--health",         "127.0.0.1:0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(argv);
  }

  nlohmann::json Instances() {
    const auto reply = testing::Http(http_port_, "GET", "/v1/services/zone/instances");
    if (reply.status != 200) return nlohmann::json::array();
    return nlohmann::json::parse(reply.body)["instances"];
  }

  testing::TempDir dir_;
  drover::testing::RegistryProcess registry_;
  std::uint16_t http_port_ = 0;
  std::uint16_t grpc_port_ = 0;
};

TEST_F(ZoneServerTest, WarmsUpRegistersServesAndLeavesCleanlyOnSigterm) {
  auto zone = Zone("z1", {"--warmup-ms", "600", "--propagation-ms", "200", "--drain-ms", "500"});
  const auto first = zone->ReadLine(20s);
  ASSERT_TRUE(first.has_value());
  const std::uint16_t health = PortIn(*first, R"(probes on http://127\.0\.0\.1:(\d+)/ready)");
  ASSERT_NE(health, 0) << *first;
  EXPECT_EQ(testing::Http(health, "GET", "/live").status, 200);
  EXPECT_EQ(testing::Http(health, "GET", "/ready").status, 503);  // still warming up
  EXPECT_TRUE(Instances().empty());

  const auto second = zone->ReadLine(20s);
  ASSERT_TRUE(second.has_value());
  const std::uint16_t port = PortIn(*second, R"(serving at 127\.0\.0\.1:(\d+))");
  ASSERT_NE(port, 0) << *second;
  EXPECT_EQ(testing::Http(health, "GET", "/ready").status, 200);
  const nlohmann::json instances = Instances();
  ASSERT_EQ(instances.size(), 1u);
  EXPECT_EQ(instances[0]["id"], "z1");
  EXPECT_EQ(instances[0]["state"], "READY");

  LineClient player(port);
  EXPECT_EQ(player.Ask("HELLO ann"), "WELCOME z1");
  EXPECT_EQ(player.Ask("PING"), "PONG");
  EXPECT_EQ(player.Ask("DANCE"), "ERR unknown command");
  EXPECT_EQ(player.Ask("QUIT"), "BYE");

  zone->Signal(SIGTERM);
  const int status = zone->Wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(Instances().empty());
}

TEST_F(ZoneServerTest, CrashAfterAbortsTheProcess) {
  auto zone = Zone("z2", {"--warmup-ms", "0", "--crash-after", "0.2"});
  ASSERT_TRUE(zone->ReadLine(20s).has_value());
  ASSERT_TRUE(zone->ReadLine(20s).has_value());  // serving
  const int status = zone->Wait();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGABRT);
}

TEST_F(ZoneServerTest, BadOptionsExitWithUsageErrors) {
  auto zone = Zone("z3", {"--listen", "nowhere"});
  const int status = zone->Wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
}

// Zone full (issue 25): a zone server at --max-players tells the registry it takes no new players
// while /ready stays 200; a real gateway then sends every new player elsewhere and the players on
// it keep playing. `drover ctl refuse|accept` does the same by hand.
TEST_F(ZoneServerTest, AFullZoneIsSkippedForNewPlayersWhileReadyAndItsPlayersKeepPlaying) {
  struct Started {
    std::unique_ptr<ChildProcess> process;
    std::uint16_t health = 0;
    std::uint16_t port = 0;
  };
  auto start = [&](const std::string& id, std::vector<std::string> extra) {
    Started z;
    extra.insert(extra.end(), {"--warmup-ms", "0"});
    z.process = Zone(id, extra);
    if (auto first = z.process->ReadLine(20s)) {
      z.health = PortIn(*first, R"(probes on http://127\.0\.0\.1:(\d+)/ready)");
    }
    if (auto second = z.process->ReadLine(20s)) {
      z.port = PortIn(*second, R"(serving at 127\.0\.0\.1:(\d+))");
    }
    return z;
  };
  Started z1 = start("z1", {"--max-players", "2"});
  Started z2 = start("z2", {});
  ASSERT_NE(z1.port, 0);
  ASSERT_NE(z2.port, 0);

  const std::string config = dir_.path() + "/gateway.yaml";
  std::ofstream(config) << "registry: 127.0.0.1:" << grpc_port_ << "\nthreads: 1\n"
                        << "listeners:\n  - name: zone\n    address: 127.0.0.1:0\n"
                        << "    service: zone\n    policy: least_conn\n";
  ChildProcess gateway({DROVER_BINARY, "gateway", "--config", config});
  const auto line = gateway.ReadLine(20s);
  ASSERT_TRUE(line.has_value());
  const std::uint16_t front = PortIn(*line, R"(zone=127\.0\.0\.1:(\d+))");
  ASSERT_NE(front, 0) << *line;
  // One short session through the gateway: the zone that welcomed it.
  auto session = [&]() -> std::string {
    LineClient player(front);
    const auto welcome = player.Ask("HELLO p");
    player.Ask("QUIT");
    return welcome ? *welcome : "";
  };
  // Every one of `n` sessions in a row lands on `zone` (until the gateway has heard).
  auto all_land_on = [&](const std::string& zone, int n) {
    return testing::Eventually(
        [&] {
          for (int i = 0; i < n; ++i) {
            if (session() != "WELCOME " + zone) return false;
          }
          return true;
        },
        10s, 20ms);
  };
  auto accepting = [&](const std::string& id) {
    for (const auto& in : Instances()) {
      if (in["id"] == id) return in["state"] == "READY" && in.value("accepting", false);
    }
    return false;
  };
  ASSERT_TRUE(testing::Eventually([&] { return accepting("z1") && accepting("z2"); }, 10s));

  // Two players on z1: full.
  LineClient ann(z1.port), bob(z1.port);
  ASSERT_EQ(ann.Ask("HELLO ann"), "WELCOME z1");
  ASSERT_EQ(bob.Ask("HELLO bob"), "WELCOME z1");
  ASSERT_TRUE(testing::Eventually([&] { return !accepting("z1"); }, 10s))
      << "z1 never said it was full";
  EXPECT_EQ(testing::Http(z1.health, "GET", "/ready").status, 200);  // full is not unready
  EXPECT_TRUE(all_land_on("z2", 20)) << "new players still reach the full zone";
  EXPECT_EQ(ann.Ask("PING"), "PONG");  // its players keep playing
  EXPECT_EQ(bob.Ask("PING"), "PONG");
  const std::string metrics = testing::Http(z1.health, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("drover_host_full 1"), std::string::npos) << metrics;

  // Both leave: room again, and with z2 refused by hand every new player goes to z1.
  EXPECT_EQ(ann.Ask("QUIT"), "BYE");
  EXPECT_EQ(bob.Ask("QUIT"), "BYE");
  ASSERT_TRUE(testing::Eventually([&] { return accepting("z1"); }, 10s));
  const std::string ctl = std::string(DROVER_BINARY) +
                          " ctl --registry http://127.0.0.1:" + std::to_string(http_port_) + " ";
  const auto refuse = testing::RunCommand(ctl + "refuse zone z2");
  ASSERT_EQ(refuse.exit_code, 0) << refuse.out;
  EXPECT_NE(refuse.out.find("zone/z2 takes no new connections"), std::string::npos) << refuse.out;
  EXPECT_FALSE(accepting("z2"));
  EXPECT_TRUE(all_land_on("z1", 20)) << "new players still reach the refused zone";
  EXPECT_EQ(testing::Http(z1.health, "GET", "/ready").status, 200);
  const auto accept = testing::RunCommand(ctl + "accept zone z2");
  ASSERT_EQ(accept.exit_code, 0) << accept.out;
  EXPECT_TRUE(testing::Eventually([&] { return session() == "WELCOME z2"; }, 10s, 20ms));
}

}  // namespace
}  // namespace drover
