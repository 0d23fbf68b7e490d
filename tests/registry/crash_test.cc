// Durability end to end: a real `drover registry` process acknowledges 1,000 registrations, is
// killed with SIGKILL, and a new process on the same data directory still has all of them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "testing/child_process.h"
#include "testing/http_client.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::ChildProcess;
using drover::testing::Http;

// Starts the registry and returns its port, read from the first stdout line (0 on failure).
std::uint16_t StartRegistry(ChildProcess& child) {
  auto line = child.ReadLine(20s);
  if (!line) return 0;
  std::smatch m;
  if (!std::regex_search(*line, m, std::regex(R"(http://127\.0\.0\.1:(\d+))"))) return 0;
  return static_cast<std::uint16_t>(std::stoi(m[1]));
}

TEST(RegistryCrashTest, AcknowledgedWritesSurviveSigkill) {
  drover::testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  // Port 0 for both APIs: a fixed default port could be anyone's.
  const std::vector<std::string> argv = {DROVER_BINARY, "registry",    "--data-dir", dir.path(),
                                         "--http",      "127.0.0.1:0", "--grpc",     "127.0.0.1:0"};
  constexpr int kWrites = 1000;
  {
    ChildProcess registry(argv);
    const std::uint16_t port = StartRegistry(registry);
    ASSERT_NE(port, 0);
    for (int i = 0; i < kWrites; ++i) {
      const std::string body = R"({"address":"127.0.0.1:)" + std::to_string(10000 + i) +
                               R"(","generation":)" + std::to_string(i + 1) +
                               R"(,"state":"READY","ttl_ms":600000})";
      auto reply = Http(port, "PUT", "/v1/services/crash/instances/i" + std::to_string(i), body);
      ASSERT_EQ(reply.status, 200) << "write " << i << ": " << reply.body;
    }
    registry.Signal(SIGKILL);
    const int status = registry.Wait();
    ASSERT_TRUE(WIFSIGNALED(status));
    ASSERT_EQ(WTERMSIG(status), SIGKILL);
  }
  ChildProcess restarted(argv);
  const std::uint16_t port = StartRegistry(restarted);
  ASSERT_NE(port, 0);
  auto reply = Http(port, "GET", "/v1/services/crash/instances");
  ASSERT_EQ(reply.status, 200);
  auto body = nlohmann::json::parse(reply.body);
  EXPECT_EQ(body["revision"], kWrites);
  ASSERT_EQ(body["instances"].size(), static_cast<std::size_t>(kWrites));
  std::set<std::string> ids;
  for (const auto& in : body["instances"]) {
    ids.insert(in["id"].get<std::string>());
    const int i = std::stoi(in["id"].get<std::string>().substr(1));
    EXPECT_EQ(in["generation"], i + 1);
    EXPECT_EQ(in["address"], "127.0.0.1:" + std::to_string(10000 + i));
  }
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(kWrites));
  // And it still serves writes, with the revision continuing where it stopped.
  auto next = Http(port, "PUT", "/v1/services/crash/instances/after",
                   R"({"address":"127.0.0.1:9","generation":1})");
  EXPECT_EQ(nlohmann::json::parse(next.body)["revision"], kWrites + 1);
  restarted.Signal(SIGTERM);
  EXPECT_EQ(restarted.Wait(), 0);
}

}  // namespace
