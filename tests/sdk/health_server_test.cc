#include "sdk/health_server.h"

#include <gtest/gtest.h>

#include <atomic>

#include "testing/http_client.h"

namespace drover::sdk {
namespace {

using testing::Http;
using testing::SendRaw;

TEST(HealthServerTest, LiveIsAlwaysOkAndReadyFollowsTheCallback) {
  std::atomic<bool> ready{false};
  auto server = HealthServer::Start("127.0.0.1:0", [&] {
    return ready ? Readiness{true, ""} : Readiness{false, "warming up (map data)"};
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::uint16_t port = (*server)->port();

  EXPECT_EQ(Http(port, "GET", "/live").status, 200);
  auto not_ready = Http(port, "GET", "/ready");
  EXPECT_EQ(not_ready.status, 503);
  EXPECT_NE(not_ready.body.find("warming up (map data)"), std::string::npos) << not_ready.body;
  ready = true;
  auto is_ready = Http(port, "GET", "/ready?verbose=1");
  EXPECT_EQ(is_ready.status, 200);
  EXPECT_EQ(is_ready.body, "ready\n");
  auto head = Http(port, "HEAD", "/ready");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
}

TEST(HealthServerTest, WrongMethodsPathsAndGarbageGetClearErrors) {
  auto server = HealthServer::Start("127.0.0.1:0", [] { return Readiness{true, ""}; });
  ASSERT_TRUE(server.ok());
  const std::uint16_t port = (*server)->port();
  EXPECT_EQ(Http(port, "POST", "/ready").status, 405);
  EXPECT_EQ(Http(port, "GET", "/healthz").status, 404);
  EXPECT_EQ(SendRaw(port, "nonsense\r\n\r\n").status, 400);
  EXPECT_EQ(SendRaw(port, "GET /live HTTP/1.1\r\nX: " + std::string(9000, 'x') + "\r\n\r\n").status,
            431);
  EXPECT_EQ(Http(port, "GET", "/live").status, 200);  // still serving
}

TEST(HealthServerTest, MetricsServeTheCallbacksTextOnlyWhenGiven) {
  auto server = HealthServer::Start(
      "127.0.0.1:0",
      [] {
        return Readiness{true, ""};
      },
      [] { return std::string("# TYPE x gauge\nx 1\n"); });
  ASSERT_TRUE(server.ok());
  const auto metrics = Http((*server)->port(), "GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.body, "# TYPE x gauge\nx 1\n");  // as given: no line added
  EXPECT_NE(metrics.headers.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(metrics.headers.find("Content-Length: 19"), std::string::npos) << metrics.headers;
  const auto head = Http((*server)->port(), "HEAD", "/metrics");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());

  auto without = HealthServer::Start("127.0.0.1:0", [] { return Readiness{true, ""}; });
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(Http((*without)->port(), "GET", "/metrics").status, 404);
}

TEST(HealthServerTest, BadAddressesAreRefusedAndStopIsPrompt) {
  EXPECT_EQ(HealthServer::Start("nowhere", [] { return Readiness{}; }).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(HealthServer::Start("127.0.0.1:99999", [] { return Readiness{}; }).status().code(),
            StatusCode::kInvalidArgument);
  auto server = HealthServer::Start("127.0.0.1:0", [] { return Readiness{}; });
  ASSERT_TRUE(server.ok());
  const std::uint16_t port = (*server)->port();
  (*server)->Stop();
  (*server)->Stop();                                // idempotent
  EXPECT_EQ(Http(port, "GET", "/live").status, 0);  // refused at once, not left in a backlog
  server->reset();
}

}  // namespace
}  // namespace drover::sdk
