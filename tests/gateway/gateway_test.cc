// The Gateway object without a registry behind it: start-up errors are clean, the admin port
// answers, and /ready says it has not heard from the registry.
#include "gateway/gateway.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <thread>

#include "common/cpu_affinity.h"
#include "common/procfs.h"
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

// The CPUs each thread of this process may run on, by thread id.
std::vector<std::vector<int>> ThreadCpus() {
  std::vector<std::vector<int>> out;
  for (const int tid : procfs::Tasks(::getpid())) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(tid, sizeof(set), &set) != 0) {
      continue;  // (a thread that just ended)
    }
    std::vector<int> cpus;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
    }
    out.push_back(std::move(cpus));
  }
  return out;
}

// Busy io threads on one CPU take turns a scheduler tick at a time: by default each is kept on
// its own share of the CPUs (all of them together: none is taken from the process), and with
// cpu_affinity: none the kernel places them.
TEST(GatewayTest, IoThreadsRunOnCpusOfTheirOwn) {
  const std::vector<int> allowed = AllowedCpus();
  const std::vector<std::vector<int>> expected = SpreadCpus(allowed, 2);
  const auto count = [](const std::vector<int>& cpus) {
    const auto all = ThreadCpus();
    return std::count(all.begin(), all.end(), cpus);
  };
  RealClock clock;
  GatewayConfig c = Config();
  c.threads = 2;
  {
    auto gw = Gateway::Start(c, clock).value();
    if (expected.empty()) {
      GTEST_LOG_(INFO) << "one CPU allowed (" << CpuList(allowed) << "): nothing to spread";
    }
    // Each io thread sets its own affinity as it starts: wait (bounded) for both.
    for (int i = 0;
         i < 200 && !expected.empty() && (count(expected[0]) != 1 || count(expected[1]) != 1);
         ++i) {
      std::this_thread::sleep_for(10ms);
    }
    for (const std::vector<int>& share : expected) {
      EXPECT_EQ(count(share), 1) << "CPUs " << CpuList(share);
    }
    // Every other thread (gRPC's, the admin server's, the test's) keeps the whole set.
    const auto all = ThreadCpus();
    EXPECT_EQ(static_cast<std::size_t>(std::count(all.begin(), all.end(), allowed)),
              all.size() - (expected.empty() ? 0 : 2));
    gw->Shutdown();
  }
  c.cpu_affinity = "none";
  auto gw = Gateway::Start(c, clock).value();
  std::this_thread::sleep_for(50ms);
  const auto all = ThreadCpus();
  EXPECT_EQ(static_cast<std::size_t>(std::count(all.begin(), all.end(), allowed)), all.size());
  gw->Shutdown();
}

}  // namespace
}  // namespace drover::gateway
