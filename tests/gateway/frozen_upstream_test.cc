// A zone server process frozen with SIGSTOP keeps its sockets open and its kernel keeps
// acknowledging: no FIN, no RST. The gateway finds it by the response timeout and cuts the
// player's connection instead of leaving it hanging.
#include <gtest/gtest.h>

#include <csignal>
#include <regex>

#include "gateway/gateway.h"
#include "registry/grpc_api.h"
#include "registry/registry.h"
#include "registry/sqlite_store.h"
#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/line_client.h"
#include "testing/temp_dir.h"

namespace drover::gateway {
namespace {

using namespace std::chrono_literals;

TEST(FrozenUpstreamTest, ASigstoppedServerIsCutByTheResponseTimeout) {
  testing::TempDir dir;
  RealClock clock;
  auto registry =
      registry::Registry::Open(registry::SqliteStore::Open(dir.path()).value(), clock).value();
  registry::GrpcOptions grpc;
  grpc.address = "127.0.0.1:0";
  auto server = registry::GrpcServer::Start(*registry, grpc).value();
  const std::string registry_address = "127.0.0.1:" + std::to_string(server->port());

  testing::ChildProcess zone({ZONE_SERVER_BINARY, "--registry", registry_address, "--id", "z1",
                              "--warmup-ms", "0", "--health", "127.0.0.1:0"});
  ASSERT_TRUE(zone.ReadLine(20s).has_value());
  ASSERT_TRUE(zone.ReadLine(20s).has_value());  // serving

  GatewayConfig c;
  c.registry = registry_address;
  c.threads = 1;
  c.admin = "";
  ListenerConfig l;
  l.name = "zone";
  l.address = "127.0.0.1:0";
  l.service = "zone";
  l.response_timeout = 1s;
  c.listeners.push_back(l);
  auto gateway = Gateway::Start(c, clock).value();
  ASSERT_TRUE(testing::Eventually(
      [&] { return gateway->SnapshotJson().find("\"routable\": true") != std::string::npos; }));

  testing::LineClient player(gateway->port("zone"));
  ASSERT_EQ(player.Ask("HELLO ann"), "WELCOME z1");
  ASSERT_TRUE(zone.Freeze());
  EXPECT_EQ(player.Ask("PING"), std::nullopt);  // cut after ~1 s, not left hanging
  EXPECT_TRUE(std::regex_search(
      gateway->MetricsText(), std::regex(R"(drover_gateway_response_timeouts_total\{[^}]*\} 1)")));
  zone.Signal(SIGCONT);
  gateway->Shutdown();
  server->Stop();
}

TEST(FrozenUpstreamTest, ActiveChecksTakeAFrozenServerOutOfRoutingAndBringItBack) {
  testing::TempDir dir;
  RealClock clock;
  auto registry =
      registry::Registry::Open(registry::SqliteStore::Open(dir.path()).value(), clock).value();
  registry::GrpcOptions grpc;
  grpc.address = "127.0.0.1:0";
  auto server = registry::GrpcServer::Start(*registry, grpc).value();
  const std::string registry_address = "127.0.0.1:" + std::to_string(server->port());
  std::vector<std::unique_ptr<testing::ChildProcess>> zones;
  for (const char* id : {"z1", "z2"}) {
    zones.push_back(std::make_unique<testing::ChildProcess>(
        std::vector<std::string>{ZONE_SERVER_BINARY, "--registry", registry_address, "--id", id,
                                 "--warmup-ms", "0", "--health", "127.0.0.1:0"}));
    ASSERT_TRUE(zones.back()->ReadLine(20s).has_value());
    ASSERT_TRUE(zones.back()->ReadLine(20s).has_value());
  }
  GatewayConfig c;
  c.registry = registry_address;
  c.threads = 1;
  c.admin = "";
  ListenerConfig l;
  l.name = "zone";
  l.address = "127.0.0.1:0";
  l.service = "zone";
  l.policy = Policy::kLeastConn;
  l.health_check_interval = 200ms;
  l.health_check_timeout = 100ms;
  l.unhealthy_threshold = 2;
  l.healthy_threshold = 1;
  c.listeners.push_back(l);
  auto gateway = Gateway::Start(c, clock).value();
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
  server->Stop();
}

}  // namespace
}  // namespace drover::gateway
