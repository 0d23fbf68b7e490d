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
  zone.Signal(SIGSTOP);
  EXPECT_EQ(player.Ask("PING"), std::nullopt);  // cut after ~1 s, not left hanging
  EXPECT_TRUE(std::regex_search(
      gateway->MetricsText(), std::regex(R"(drover_gateway_response_timeouts_total\{[^}]*\} 1)")));
  zone.Signal(SIGCONT);
  gateway->Shutdown();
  server->Stop();
}

}  // namespace
}  // namespace drover::gateway
