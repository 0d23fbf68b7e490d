// SessionServer over real loopback sockets: sessions on their own threads, connects refused
// after StopAccepting, a drain that lets sessions finish and cuts the rest at the deadline.
#include "sdk/session_server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <string>

#include "sdk/socket_util.h"
#include "testing/eventually.h"
#include "testing/line_client.h"

namespace drover::sdk {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;
using testing::LineClient;

// Echoes lines back until the client leaves (or the socket is shut down).
void Echo(Session& s) {
  char buf[256];
  while (true) {
    const ssize_t n = ::recv(s.fd(), buf, sizeof buf, 0);
    if (n <= 0) return;
    SendAll(s.fd(), std::string_view(buf, static_cast<std::size_t>(n)));
  }
}

std::uint16_t PortOf(const std::string& address) {
  return static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

TEST(SessionServerTest, ServesEachConnectionOnItsOwnThread) {
  SessionServer server;
  ASSERT_TRUE(server.Open("127.0.0.1:0").ok());
  server.Serve(Echo);
  const std::uint16_t port = PortOf(server.address());
  LineClient a(port), b(port);
  ASSERT_TRUE(a.connected() && b.connected());
  EXPECT_EQ(a.Ask("one"), "one");
  EXPECT_EQ(b.Ask("two"), "two");  // a's session is still open: b is not queued behind it
  EXPECT_TRUE(Eventually([&] { return server.active() == 2; }));
  EXPECT_EQ(server.served(), 2u);
}

TEST(SessionServerTest, RefusesConnectsAfterStopAcceptingButKeepsSessions) {
  SessionServer server;
  ASSERT_TRUE(server.Open("127.0.0.1:0").ok());
  server.Serve(Echo);
  const std::uint16_t port = PortOf(server.address());
  LineClient before(port);
  ASSERT_EQ(before.Ask("hi"), "hi");
  server.StopAccepting();
  server.StopAccepting();  // idempotent
  LineClient after(port);
  EXPECT_FALSE(after.connected());
  EXPECT_EQ(before.Ask("still here"), "still here");
}

TEST(SessionServerTest, DrainLetsSessionsFinishAndCutsTheRestAtTheDeadline) {
  SessionServer server;
  ASSERT_TRUE(server.Open("127.0.0.1:0").ok());
  std::atomic<bool> saw_draining{false};
  server.Serve([&](Session& s) {
    Echo(s);
    if (s.draining()) saw_draining = true;
  });
  const std::uint16_t port = PortOf(server.address());
  auto leaving = std::make_unique<LineClient>(port);
  LineClient staying(port);
  ASSERT_EQ(leaving->Ask("a"), "a");
  ASSERT_EQ(staying.Ask("b"), "b");
  server.StopAccepting();
  std::thread leave([&] {
    std::this_thread::sleep_for(50ms);  // leaves during the drain, not before it
    leaving.reset();
  });
  const DrainResult r = server.Drain(500ms);
  leave.join();
  EXPECT_EQ(r.finished, 1u);
  EXPECT_EQ(r.cut, 1u);
  EXPECT_EQ(staying.ReadLine(), std::nullopt);  // the server shut the socket down
  EXPECT_TRUE(saw_draining.load());
  EXPECT_EQ(server.active(), 0u);
}

TEST(SessionServerTest, AThreadWhoseSessionEndedServesTheNextAndADrainEndsTheWaitingOnes) {
  SessionServer server;
  ASSERT_TRUE(server.Open("127.0.0.1:0").ok());
  server.Serve(Echo);
  const std::uint16_t port = PortOf(server.address());
  // Short sessions one after another: one thread serves them all.
  for (int i = 0; i < 20; ++i) {
    {
      LineClient c(port);
      ASSERT_EQ(c.Ask("short " + std::to_string(i)), "short " + std::to_string(i));
    }
    ASSERT_TRUE(Eventually([&] { return server.active() == 0; }));
  }
  EXPECT_EQ(server.threads(), 1u);
  // Sessions open together still each have a thread of their own.
  {
    LineClient a(port), b(port), c(port);
    EXPECT_EQ(a.Ask("a"), "a");
    EXPECT_EQ(b.Ask("b"), "b");
    EXPECT_EQ(c.Ask("c"), "c");
    EXPECT_EQ(server.threads(), 3u);
  }
  EXPECT_TRUE(Eventually([&] { return server.active() == 0; }));
  EXPECT_EQ(server.threads(), 3u);  // waiting for the next sessions
  EXPECT_EQ(server.served(), 23u);
  server.StopAccepting();
  const DrainResult r = server.Drain(1s);
  EXPECT_EQ(r.cut, 0u);
  EXPECT_EQ(server.threads(), 0u);
}

TEST(SessionServerTest, AdoptsAListenerAndRejectsOtherDescriptors) {
  auto listening = ListenTcp("127.0.0.1:0", 16, "test");
  ASSERT_TRUE(listening.ok());
  SessionServer server;
  ASSERT_TRUE(server.Adopt(listening->fd).ok());
  EXPECT_EQ(server.address(), "127.0.0.1:" + std::to_string(listening->port));
  server.Serve(Echo);
  LineClient c(listening->port);
  EXPECT_EQ(c.Ask("x"), "x");

  SessionServer other;
  const int not_listening = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(other.Adopt(not_listening).code(), StatusCode::kInvalidArgument);
  ::close(not_listening);
  EXPECT_EQ(other.Open("nonsense").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace drover::sdk
