// The README's "zone server by hand" as a test: real `drover registry` and `zone_server`
// processes on loopback, driven with signals and real sockets.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <nlohmann/json.hpp>
#include <regex>

#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/http_client.h"
#include "testing/line_client.h"
#include "testing/port_in.h"
#include "testing/registry_process.h"
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

}  // namespace
}  // namespace drover
