// A zone server process frozen with SIGSTOP keeps its sockets open and its kernel keeps
// acknowledging: no FIN, no RST. The gateway finds it by the response timeout and cuts the
// player's connection instead of leaving it hanging.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "gateway/gateway.h"
#include "registry/grpc_api.h"
#include "registry/registry.h"
#include "registry/sqlite_store.h"
#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/http_client.h"
#include "testing/line_client.h"
#include "testing/temp_dir.h"

namespace drover::gateway {
namespace {

using namespace std::chrono_literals;

// A registry in this process (served over gRPC on loopback) that zone server processes join.
class FrozenUpstreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ =
        registry::Registry::Open(registry::SqliteStore::Open(dir_.path()).value(), clock_).value();
    registry::GrpcOptions grpc;
    grpc.address = "127.0.0.1:0";
    server_ = registry::GrpcServer::Start(*registry_, grpc).value();
    registry_address_ = "127.0.0.1:" + std::to_string(server_->port());
  }
  void TearDown() override { server_->Stop(); }

  // A zone server process, started and serving.
  std::unique_ptr<testing::ChildProcess> Zone(const std::string& id) {
    auto zone = std::make_unique<testing::ChildProcess>(
        std::vector<std::string>{ZONE_SERVER_BINARY, "--registry", registry_address_, "--id", id,
                                 "--warmup-ms", "0", "--health", "127.0.0.1:0"});
    EXPECT_TRUE(zone->ReadLine(20s).has_value());
    EXPECT_TRUE(zone->ReadLine(20s).has_value());  // serving
    return zone;
  }

  // One TCP listener `name` for service "zone" on a free port, routed from this fixture's
  // registry; no admin endpoint (so no registration as drover-gateway). Tests set the rest.
  GatewayConfig OneListener(const std::string& name = "zone") const {
    GatewayConfig c;
    c.registry = registry_address_;
    c.threads = 1;
    c.admin = "";
    c.register_self = false;
    ListenerConfig l;
    l.name = name;
    l.address = "127.0.0.1:0";
    l.service = "zone";
    c.listeners.push_back(l);
    return c;
  }

  testing::TempDir dir_;
  RealClock clock_;
  std::unique_ptr<registry::Registry> registry_;
  std::unique_ptr<registry::GrpcServer> server_;
  std::string registry_address_;
};

TEST_F(FrozenUpstreamTest, ASigstoppedServerIsCutByTheResponseTimeout) {
  auto zone = Zone("z1");

  GatewayConfig c = OneListener();
  ListenerConfig& l = c.listeners[0];
  l.response_timeout = 1s;
  auto gateway = Gateway::Start(c, clock_).value();
  ASSERT_TRUE(testing::Eventually(
      [&] { return gateway->SnapshotJson().find("\"routable\": true") != std::string::npos; }));

  testing::LineClient player(gateway->port("zone"));
  ASSERT_EQ(player.Ask("HELLO ann"), "WELCOME z1");
  ASSERT_TRUE(zone->Freeze());
  EXPECT_EQ(player.Ask("PING"), std::nullopt);  // cut after ~1 s, not left hanging
  EXPECT_TRUE(std::regex_search(
      gateway->MetricsText(), std::regex(R"(drover_gateway_response_timeouts_total\{[^}]*\} 1)")));
  zone->Signal(SIGCONT);
  gateway->Shutdown();
}

TEST_F(FrozenUpstreamTest, ActiveChecksTakeAFrozenServerOutOfRoutingAndBringItBack) {
  std::vector<std::unique_ptr<testing::ChildProcess>> zones;
  zones.push_back(Zone("z1"));
  zones.push_back(Zone("z2"));
  GatewayConfig c = OneListener();
  ListenerConfig& l = c.listeners[0];
  l.policy = Policy::kLeastConn;
  l.health_check_interval = 200ms;
  l.health_check_timeout = 100ms;
  l.unhealthy_threshold = 2;
  l.healthy_threshold = 1;
  auto gateway = Gateway::Start(c, clock_).value();
  const std::regex healthy_z1(R"(drover_gateway_upstream_healthy\{[^}]*instance="z1"\} 1)");
  const std::regex unhealthy_z1(R"(drover_gateway_upstream_healthy\{[^}]*instance="z1"\} 0)");
  ASSERT_TRUE(
      testing::Eventually([&] { return std::regex_search(gateway->MetricsText(), healthy_z1); }));

  ASSERT_TRUE(zones[0]->Freeze());  // z1 frozen: its kernel still accepts connects
  ASSERT_TRUE(
      testing::Eventually([&] { return std::regex_search(gateway->MetricsText(), unhealthy_z1); }));
  for (int i = 0; i < 10; ++i) {  // every new player lands on the live one
    testing::LineClient player(gateway->port("zone"));
    EXPECT_EQ(player.Ask("HELLO p"), "WELCOME z2");
  }
  zones[0]->Signal(SIGCONT);
  ASSERT_TRUE(
      testing::Eventually([&] { return std::regex_search(gateway->MetricsText(), healthy_z1); }));
  gateway->Shutdown();
}

// The routing table's version is the registry revision it was built from: non-zero once
// discovered, and new with every change of the table.
TEST_F(FrozenUpstreamTest, TheTableVersionIsSetByDiscoveryAndMovesWithTheTable) {
  auto z1 = Zone("z1");
  GatewayConfig c = OneListener();
  auto gateway = Gateway::Start(c, clock_).value();
  auto table = [&] {
    const auto j = nlohmann::json::parse(gateway->SnapshotJson())["listeners"][0];
    return std::pair{j["version"].get<std::uint64_t>(), j["instances"].size()};
  };
  ASSERT_TRUE(testing::Eventually([&] { return table().second == 1; }));
  const std::uint64_t first = table().first;
  EXPECT_GT(first, 0u);
  auto z2 = Zone("z2");
  ASSERT_TRUE(testing::Eventually([&] { return table().second == 2; }));
  const std::uint64_t second = table().first;
  EXPECT_GT(second, first);
  EXPECT_NE(gateway->MetricsText().find("drover_gateway_routing_table_version{listener=\"zone\","
                                        "service=\"zone\"} " +
                                        std::to_string(second)),
            std::string::npos);
  z2->Signal(SIGTERM);  // leaves discovery: a new table, a new version
  ASSERT_TRUE(testing::Eventually([&] { return table().second == 1; }));
  EXPECT_GT(table().first, second);
  gateway->Shutdown();
}

// Staleness policy: a gateway whose registry has been gone longer than max_stale says so on its
// /ready (503, why) and in its metrics, and still routes on its last table.
TEST_F(FrozenUpstreamTest, AGatewayPastMaxStaleIsNotReadyButStillRoutes) {
  auto z1 = Zone("z1");
  GatewayConfig c = OneListener();
  c.admin = "127.0.0.1:0";
  c.max_stale = 10s;  // the least allowed: twice the registry's idle PROGRESS interval
  auto gateway = Gateway::Start(c, clock_).value();
  ASSERT_TRUE(testing::Eventually(
      [&] { return gateway->SnapshotJson().find("\"routable\": true") != std::string::npos; }));
  EXPECT_EQ(testing::Http(gateway->admin_port(), "GET", "/ready").status, 200);

  server_->Stop();  // the registry is gone
  testing::HttpReply ready;
  ASSERT_TRUE(testing::Eventually(
      [&] {
        ready = testing::Http(gateway->admin_port(), "GET", "/ready");
        return ready.status == 503;
      },
      20s, 50ms));
  EXPECT_NE(ready.body.find("the registry has not been heard for"), std::string::npos)
      << ready.body;
  EXPECT_NE(ready.body.find("still routing on the last table"), std::string::npos) << ready.body;
  EXPECT_NE(gateway->MetricsText().find("drover_gateway_discovery_stale{listener=\"zone\","
                                        "service=\"zone\"} 1"),
            std::string::npos);
  for (int i = 0; i < 5; ++i) {  // routing goes on
    testing::LineClient player(gateway->port("zone"));
    EXPECT_EQ(player.Ask("HELLO p"), "WELCOME z1");
  }
  gateway->Shutdown();
}

// Seed 002's hot key, live (issue 25): 20,000 sessions through a real gateway to 5 zone servers,
// keys drawn from Zipf(1.1) over 10,000 keys, bounded load off. Without spreading the owner of the
// hottest keys carries far more than its share (about 1.56x the mean); with keys over 1% of the
// traffic spread over their first 4 owners the busiest server stays within 1.3x the mean (about
// 1.2x; with 3 owners about 1.26x).
TEST_F(FrozenUpstreamTest, HotKeysSpreadOverTheirNextOwnersEvenTheLoad) {
  std::vector<std::unique_ptr<testing::ChildProcess>> zones;
  for (int i = 1; i <= 5; ++i) zones.push_back(Zone("z" + std::to_string(i)));
  // Zipf(1.1) over 10,000 keys: key k (1-based) with weight k^-1.1.
  constexpr int kKeys = 10'000;
  constexpr int kSessions = 20'000;
  std::vector<double> cdf(kKeys);
  double sum = 0;
  for (int k = 1; k <= kKeys; ++k) cdf[k - 1] = (sum += std::pow(k, -1.1));
  for (double& c : cdf) c /= sum;

  auto run = [&](double hot_key_fraction) {
    GatewayConfig c = OneListener("keyed");
    ListenerConfig& l = c.listeners[0];
    l.policy = Policy::kHash;
    l.bounded_load = 1e9;  // off: only the keys decide
    l.hot_key_fraction = hot_key_fraction;
    l.hot_key_owners = 4;
    auto gateway = Gateway::Start(c, clock_).value();
    EXPECT_TRUE(testing::Eventually([&] {
      return nlohmann::json::parse(gateway->SnapshotJson())["listeners"][0]["instances"].size() ==
             5;
    }));
    std::map<std::string, int> served;
    std::mutex mu;
    int failed = 0;
    std::vector<std::thread> players;
    for (int t = 0; t < 4; ++t) {
      players.emplace_back([&, t] {
        std::mt19937_64 rng(1000 + t);
        std::uniform_real_distribution<double> u(0, 1);
        for (int i = 0; i < kSessions / 4; ++i) {
          const int key =
              static_cast<int>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
          testing::LineClient player(gateway->port("keyed"));
          player.Send("DROVER-KEY k" + std::to_string(key));
          const auto welcome = player.Ask("HELLO p");
          player.Ask("QUIT");
          std::lock_guard lock(mu);
          if (welcome && welcome->rfind("WELCOME ", 0) == 0) {
            ++served[welcome->substr(8)];
          } else {
            ++failed;
          }
        }
      });
    }
    for (auto& p : players) p.join();
    const std::string snapshot = gateway->SnapshotJson();
    gateway->Shutdown();
    EXPECT_EQ(failed, 0);
    int busiest = 0;
    for (const auto& [id, n] : served) busiest = std::max(busiest, n);
    const double mean = static_cast<double>(kSessions) / 5;
    return std::pair{busiest / mean, snapshot};
  };
  const auto [off, off_snapshot] = run(0);
  const auto [on, on_snapshot] = run(0.01);
  std::printf(
      "busiest server's share / mean over 20,000 Zipf(1.1) sessions: %.2f with hot-key "
      "spreading off, %.2f with it on (hot keys: %s)\n",
      off, on, nlohmann::json::parse(on_snapshot)["listeners"][0]["hot_keys"].dump().c_str());
  EXPECT_LE(on, 1.3);
  EXPECT_GT(off, on);
  EXPECT_FALSE(nlohmann::json::parse(on_snapshot)["listeners"][0]["hot_keys"].empty());
  EXPECT_TRUE(nlohmann::json::parse(off_snapshot)["listeners"][0]["hot_keys"].empty());
}

// Staged key migration through a real gateway (issue 25): a sixth zone server joins five; keys
// move to it in 4 steps, about a quarter of the moving ones each, a sixth of all keys in the end;
// sessions already open are never cut.
TEST_F(FrozenUpstreamTest, AJoiningServerTakesItsKeysInStepsWithoutCuttingASession) {
  std::vector<std::unique_ptr<testing::ChildProcess>> zones;
  for (int i = 1; i <= 5; ++i) zones.push_back(Zone("z" + std::to_string(i)));
  GatewayConfig c = OneListener("keyed");
  ListenerConfig& l = c.listeners[0];
  l.policy = Policy::kHash;
  l.bounded_load = 1e9;  // only the keys decide
  l.migration_steps = 4;
  l.migration_step = 1500ms;
  auto gateway = Gateway::Start(c, clock_).value();
  auto listener = [&] { return nlohmann::json::parse(gateway->SnapshotJson())["listeners"][0]; };
  ASSERT_TRUE(testing::Eventually([&] {
    const auto j = listener();
    return j["instances"].size() == 5 && j["migration"].is_null();
  }));
  constexpr int kKeys = 300;
  auto owners = [&] {
    std::vector<std::string> out;
    for (int k = 0; k < kKeys; ++k) {
      testing::LineClient player(gateway->port("keyed"));
      player.Send("DROVER-KEY k" + std::to_string(k));
      const auto welcome = player.Ask("HELLO p");
      player.Ask("QUIT");
      out.push_back(welcome ? *welcome : "");
    }
    return out;
  };
  const std::vector<std::string> before = owners();
  // Players who stay connected through the whole migration.
  std::vector<std::unique_ptr<testing::LineClient>> stayers;
  for (int k = 0; k < 5; ++k) {
    stayers.push_back(std::make_unique<testing::LineClient>(gateway->port("keyed")));
    stayers.back()->Send("DROVER-KEY k" + std::to_string(k));
    ASSERT_TRUE(stayers.back()->Ask("HELLO stayer").has_value());
  }
  zones.push_back(Zone("z6"));
  std::map<int, int> moved_at_step;  // step -> keys away from their first owner
  std::set<std::string> versions_seen;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto j = listener();
    const int step = j["migration"].is_null() ? 0 : j["migration"]["step"].get<int>();
    versions_seen.insert(std::to_string(j["version"].get<std::uint64_t>()) + "/" +
                         std::to_string(step));
    if (moved_at_step.count(0)) break;  // measured after the last step: done
    // Step 0 with six instances is the end (the migration starts at step 1 with the new table).
    if (j["instances"].size() != 6 || moved_at_step.count(step) ||
        (step == 0 && moved_at_step.size() < 4)) {
      std::this_thread::sleep_for(50ms);
      continue;
    }
    const std::vector<std::string> now = owners();
    const auto k = listener();  // the step must not have moved on while the keys were read
    const int after = k["migration"].is_null() ? 0 : k["migration"]["step"].get<int>();
    if (after != step) continue;
    int moved = 0;
    for (int key = 0; key < kKeys; ++key) moved += now[key] != before[key] ? 1 : 0;
    moved_at_step[step] = moved;
  }
  std::printf("keys moved (of %d) at each step:", kKeys);
  for (const auto& [step, n] : moved_at_step) std::printf(" step %d: %d", step, n);
  std::printf("; table versions/steps seen:");
  for (const std::string& v : versions_seen) std::printf(" %s", v.c_str());
  std::printf("\n");
  ASSERT_TRUE(moved_at_step.count(0)) << "the migration never finished";
  const int total = moved_at_step[0];
  EXPECT_LE(total, static_cast<int>(kKeys * 1.1 / 6));  // <= 1.1x the ideal sixth
  EXPECT_GT(total, kKeys / 12);
  int previous = 0;
  for (int step = 1; step <= 4; ++step) {
    if (!moved_at_step.count(step)) continue;
    EXPECT_GE(moved_at_step[step], previous) << "step " << step;  // keys move one way, in steps
    previous = moved_at_step[step];
  }
  if (moved_at_step.count(1)) {
    EXPECT_LT(moved_at_step[1], total) << "step 1 moved everything";
  }
  for (auto& stayer : stayers) EXPECT_EQ(stayer->Ask("PING"), "PONG");  // no session cut
  gateway->Shutdown();
}

}  // namespace
}  // namespace drover::gateway
