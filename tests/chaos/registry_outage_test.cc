// Fault injection: the registry (SQLite store) is SIGKILLed in the middle of a write storm while
// players connect through a gateway to zone servers registered in it.
//   - every write the registry acknowledged before it died is there after it restarts;
//   - meanwhile the gateway keeps routing on its last routing table -- no player fails -- and
//     reports the table's staleness (drover_gateway_discovery_age_seconds grows);
//   - after the restart the gateway, the zone servers and the writers carry on by themselves.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/free_port.h"
#include "testing/http_client.h"
#include "testing/line_client.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::ChildProcess;
using drover::testing::Eventually;
using drover::testing::Http;
using drover::testing::LineClient;

// The gateway's discovery age for its listener, from /metrics; -1 when absent.
double DiscoveryAge(std::uint16_t admin) {
  const auto metrics = Http(admin, "GET", "/metrics");
  std::smatch m;
  static const std::regex age(R"(drover_gateway_discovery_age_seconds\{[^}]*\} ([0-9.e+-]+))");
  if (!std::regex_search(metrics.body, m, age)) return -1;
  return std::stod(m[1].str());
}

TEST(RegistryOutageTest, AcknowledgedWritesSurviveAndTheGatewayRoutesOnItsLastTable) {
  drover::testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  // Fixed ports: the restarted registry must be where everyone looks for it.
  const std::uint16_t http = drover::testing::FreeLoopbackPort();
  const std::uint16_t grpc = drover::testing::FreeLoopbackPort();
  const std::string grpc_address = "127.0.0.1:" + std::to_string(grpc);
  const std::vector<std::string> registry_argv = {
      DROVER_BINARY, "registry",
      "--data-dir",  dir.path() + "/registry",
      "--http",      "127.0.0.1:" + std::to_string(http),
      "--grpc",      grpc_address};
  auto registry = std::make_unique<ChildProcess>(registry_argv);
  ASSERT_TRUE(registry->ReadLine(20s).has_value());

  std::vector<std::unique_ptr<ChildProcess>> zones;
  for (int i = 1; i <= 2; ++i) {
    zones.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{
        DROVER_BINARY, "sample", "zone", "--registry", grpc_address, "--id",
        "z" + std::to_string(i), "--listen", drover::testing::FreeLoopbackAddress(), "--health",
        drover::testing::FreeLoopbackAddress(), "--warmup-ms", "0", "--ttl-ms", "3000",
        "--log-level", "error"}));
  }
  const std::uint16_t admin = drover::testing::FreeLoopbackPort();
  const std::uint16_t players = drover::testing::FreeLoopbackPort();
  {
    std::ofstream config(dir.path() + "/gateway.yaml");
    config << "registry: " << grpc_address << "\nadmin: 127.0.0.1:" << admin
           << "\nthreads: 1\nlisteners:\n  - name: zone\n    address: 127.0.0.1:" << players
           << "\n    service: zone\n";
  }
  ChildProcess gateway({DROVER_BINARY, "gateway", "--config", dir.path() + "/gateway.yaml"});
  ASSERT_TRUE(gateway.ReadLine(20s).has_value());
  ASSERT_TRUE(Eventually(
      [&] {
        LineClient c(players);
        return c.Ask("HELLO p").value_or("").rfind("WELCOME z", 0) == 0;
      },
      20s));

  // Players: a new session every 10 ms through the gateway, for the whole test.
  std::atomic<int> sessions{0}, failures{0};
  std::jthread player([&](std::stop_token stop) {
    while (!stop.stop_requested()) {
      LineClient c(players);
      const auto welcome = c.Ask("HELLO p");
      ++sessions;
      if (!welcome || welcome->rfind("WELCOME z", 0) != 0 || c.Ask("QUIT") != "BYE") ++failures;
      std::this_thread::sleep_for(10ms);
    }
  });
  // Writers: registrations as fast as the registry acknowledges them; every 200 is remembered.
  std::mutex mu;
  std::set<std::string> acked;
  std::atomic<int> refused{0};
  std::jthread writer([&](std::stop_token stop) {
    for (int i = 0; !stop.stop_requested(); ++i) {
      const std::string id = "w" + std::to_string(i);
      const auto put = Http(http, "PUT", "/v1/services/storm/instances/" + id,
                            R"({"address":"127.0.0.1:1","generation":1,"state":"READY",)"
                            R"("ttl_ms":600000})");
      if (put.status == 200) {
        std::lock_guard lock(mu);
        acked.insert(id);
      } else {
        ++refused;
        std::this_thread::sleep_for(20ms);
      }
    }
  });

  std::this_thread::sleep_for(1500ms);
  registry->Signal(SIGKILL);
  registry->Wait();
  const std::size_t acked_before = [&] {
    std::lock_guard lock(mu);
    return acked.size();
  }();
  // The outage: players keep getting in; the gateway says its table is getting old.
  std::this_thread::sleep_for(3s);
  const double stale = DiscoveryAge(admin);
  EXPECT_GT(stale, 2.0) << "the gateway should report how old its routing table is";
  const int failures_during = failures.load();

  registry = std::make_unique<ChildProcess>(registry_argv);
  ASSERT_TRUE(registry->ReadLine(20s).has_value());
  EXPECT_TRUE(
      Eventually([&] { return DiscoveryAge(admin) >= 0 && DiscoveryAge(admin) < 1.5; }, 15s))
      << "the gateway should follow the registry again";
  EXPECT_TRUE(Eventually(
      [&] {
        std::lock_guard lock(mu);
        return acked.size() > acked_before + 20;
      },
      10s))
      << "the writers should be acknowledged again";
  writer.request_stop();
  writer.join();
  std::this_thread::sleep_for(500ms);
  player.request_stop();
  player.join();

  const auto list = Http(http, "GET", "/v1/services/storm/instances");
  ASSERT_EQ(list.status, 200) << list.body;
  std::set<std::string> present;
  const auto listed = nlohmann::json::parse(list.body, nullptr, false);
  ASSERT_TRUE(listed.is_object());
  for (const auto& in : listed["instances"]) {
    present.insert(in["id"].get<std::string>());
  }
  std::size_t lost = 0;
  for (const std::string& id : acked) lost += present.count(id) == 0 ? 1 : 0;
  std::printf(
      "registry outage: %zu writes acknowledged (%zu before the SIGKILL), %d refused while it "
      "was down, %zu lost; %d player sessions, %d failed (%d during the outage); gateway "
      "table age %.1f s at 3 s into the outage\n",
      acked.size(), acked_before, refused.load(), lost, sessions.load(), failures.load(),
      failures_during, stale);
  EXPECT_EQ(lost, 0u);
  EXPECT_GT(acked_before, 50u);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(sessions.load(), 200);
  // Both zone servers are READY again in the restarted registry (re-registered or renewed).
  EXPECT_TRUE(Eventually(
      [&] {
        const auto zone = Http(http, "GET", "/v1/services/zone/instances");
        const auto body = nlohmann::json::parse(zone.body, nullptr, false);
        int ready = 0;
        if (body.is_object()) {
          for (const auto& in : body["instances"]) ready += in["state"] == "READY" ? 1 : 0;
        }
        return ready == 2;
      },
      15s));
}

}  // namespace
