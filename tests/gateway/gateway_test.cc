// The Gateway object without a registry behind it: start-up errors are clean, the admin port
// answers, and /ready says it has not heard from the registry.
#include "gateway/gateway.h"

#include <gtest/gtest.h>

#include "sdk/socket_util.h"
#include "testing/free_port.h"
#include "testing/http_client.h"

namespace drover::gateway {
namespace {

using namespace std::chrono_literals;

GatewayConfig Config() {
  GatewayConfig c;
  c.registry = testing::FreeLoopbackAddress();  // nobody there
  c.threads = 1;
  c.admin = "127.0.0.1:0";
  c.drain = 0s;
  ListenerConfig l;
  l.name = "zone";
  l.address = "127.0.0.1:0";
  l.service = "zone";
  c.listeners.push_back(l);
  return c;
}

TEST(GatewayTest, APortInUseIsACleanErrorNotAHang) {
  GatewayConfig c = Config();
  const std::string taken = testing::FreeLoopbackAddress();
  auto holder = sdk::ListenTcp(taken, 1, "holder");
  ASSERT_TRUE(holder.ok());
  c.listeners.push_back(c.listeners[0]);
  c.listeners[1].name = "second";
  c.listeners[1].address = taken;
  RealClock clock;
  auto gw = Gateway::Start(c, clock);
  ASSERT_FALSE(gw.ok());
  EXPECT_EQ(gw.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(gw.status().message().find("cannot listen on " + taken), std::string::npos)
      << gw.status().message();
  ::close(holder->fd);
}

TEST(GatewayTest, AdminAnswersAndReadyWaitsForTheRegistry) {
  RealClock clock;
  auto gw = Gateway::Start(Config(), clock).value();
  const std::uint16_t admin = gw->admin_port();
  EXPECT_EQ(testing::Http(admin, "GET", "/live").status, 200);
  const auto ready = testing::Http(admin, "GET", "/ready");
  EXPECT_EQ(ready.status, 503);
  EXPECT_EQ(ready.body, "not ready: waiting for the registry\n");
  const auto metrics = testing::Http(admin, "GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find(
                "drover_gateway_routing_table_version{listener=\"zone\",service=\"zone\"} 0"),
            std::string::npos)
      << metrics.body;
  const auto snapshot = testing::Http(admin, "GET", "/admin/snapshot");
  EXPECT_EQ(snapshot.status, 200);
  EXPECT_NE(snapshot.body.find("\"discovered\": false"), std::string::npos) << snapshot.body;
  EXPECT_NE(snapshot.body.find("\"slow_start_seconds\": 30.0"), std::string::npos) << snapshot.body;
  // Read by the registry's dashboard from another origin: every GET answer allows it.
  const std::string cors = "Access-Control-Allow-Origin: *";
  EXPECT_NE(snapshot.headers.find(cors), std::string::npos) << snapshot.headers;
  EXPECT_NE(metrics.headers.find(cors), std::string::npos) << metrics.headers;
  EXPECT_EQ(testing::Http(admin, "POST", "/metrics").headers.find(cors), std::string::npos);
  EXPECT_EQ(testing::Http(admin, "POST", "/metrics").status, 405);
  EXPECT_EQ(testing::Http(admin, "GET", "/nope").status, 404);
  // With no instance known, a client is closed at once rather than left waiting.
  const int fd = testing::ConnectLoopback(gw->port("zone"));
  ASSERT_GE(fd, 0);
  char c;
  EXPECT_EQ(::recv(fd, &c, 1, 0), 0);
  ::close(fd);
  gw->Shutdown();
  gw->Shutdown();  // idempotent
}

}  // namespace
}  // namespace drover::gateway
