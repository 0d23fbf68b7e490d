// Fault injection: one of three `drover sample zone` backends behind a `drover gateway` (TCP
// listener, active /ready checks) is frozen with SIGSTOP while players keep opening sessions. A
// frozen process keeps its sockets and its kernel keeps accepting and acknowledging: no FIN, no
// RST, only silence. Then it is thawed with SIGCONT.
//   - the gateway takes it out of routing (drover_gateway_upstream_healthy 0) within a bound;
//   - from that point no session goes to it and every session succeeds on the others; the ones
//     caught on it before are cut by the response timeout (counted, not hanging);
//   - thawed, it passes its checks again and gets new sessions.
// tests/gateway/frozen_upstream_test.cc checks the two mechanisms in one process; this is the
// whole chain with every part a real process.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/free_port.h"
#include "testing/http_client.h"
#include "testing/line_client.h"
#include "testing/port_in.h"
#include "testing/registry_process.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::ChildProcess;
using drover::testing::Eventually;
using drover::testing::Http;
using Clock = std::chrono::steady_clock;

constexpr auto kEjectionBound = 5s;

// What one player session came to.
struct Session {
  Clock::time_point began;
  Clock::time_point ended;
  std::string served_by;  // the instance in WELCOME, "" if none
  bool ok = false;        // WELCOME, PONG and BYE
};

Session Visit(std::uint16_t port) {
  Session s;
  s.began = Clock::now();
  drover::testing::LineClient c(port);
  const auto welcome = c.Ask("HELLO player");
  if (welcome && welcome->rfind("WELCOME ", 0) == 0) {
    s.served_by = welcome->substr(8);
    s.ok = c.Ask("PING") == "PONG" && c.Ask("QUIT") == "BYE";
  }
  s.ended = Clock::now();
  return s;
}

// 1 or 0 from drover_gateway_upstream_healthy for `instance`; -1 when it is not listed.
int Healthy(std::uint16_t admin, const std::string& instance) {
  const auto metrics = Http(admin, "GET", "/metrics");
  std::smatch m;
  const std::regex line("drover_gateway_upstream_healthy\\{[^}]*instance=\"" + instance +
                        "\"[^}]*\\} ([01])");
  if (!std::regex_search(metrics.body, m, line)) return -1;
  return std::stoi(m[1].str());
}

TEST(BackendFreezeTest, AFrozenBackendIsEjectedNoSessionFailsAfterwardsAndItComesBack) {
  drover::testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const auto registry = drover::testing::StartRegistryProcess(
      DROVER_BINARY,
      {"--data-dir", dir.path() + "/registry", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"});
  ASSERT_NE(registry.grpc, 0) << registry.line;

  // Long leases: the frozen one must leave routing by the gateway's checks, not by expiry.
  std::vector<std::unique_ptr<ChildProcess>> zones;
  for (int i = 1; i <= 3; ++i) {
    zones.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{
        DROVER_BINARY, "sample", "zone", "--registry", registry.grpc_address(), "--id",
        "z" + std::to_string(i), "--listen", drover::testing::FreeLoopbackAddress(), "--health",
        drover::testing::FreeLoopbackAddress(), "--warmup-ms", "0", "--ttl-ms", "30000",
        "--log-level", "error"}));
  }
  const std::string config = dir.path() + "/gateway.yaml";
  std::ofstream(config) << "registry: " << registry.grpc_address()
                        << "\nadmin: 127.0.0.1:0\nthreads: 1\nlisteners:\n"
                        << "  - name: zone\n    address: 127.0.0.1:0\n    service: zone\n"
                        << "    slow_start_ms: 0\n    response_timeout_ms: 1000\n"
                        << "    health_check_interval_ms: 250\n    health_check_timeout_ms: 200\n"
                        << "    unhealthy_threshold: 2\n    healthy_threshold: 1\n";
  ChildProcess gateway({DROVER_BINARY, "gateway", "--config", config});
  const auto gateway_line = gateway.ReadLine(20s);
  ASSERT_TRUE(gateway_line.has_value());
  const std::uint16_t players =
      drover::testing::PortIn(*gateway_line, R"(zone=127\.0\.0\.1:(\d+))");
  const std::uint16_t admin =
      drover::testing::PortIn(*gateway_line, R"(admin http://127\.0\.0\.1:(\d+))");
  ASSERT_NE(players, 0) << *gateway_line;
  ASSERT_NE(admin, 0) << *gateway_line;
  ASSERT_TRUE(Eventually(
      [&] {
        return Healthy(admin, "z1") == 1 && Healthy(admin, "z2") == 1 && Healthy(admin, "z3") == 1;
      },
      20s, 50ms))
      << "the gateway never saw three healthy zone servers";

  // Players: two loops of whole sessions (HELLO, PING, QUIT), for the whole test.
  std::mutex mu;
  std::vector<Session> sessions;  // guarded by mu
  std::vector<std::jthread> loops;
  for (int p = 0; p < 2; ++p) {
    loops.emplace_back([&](std::stop_token stop) {
      while (!stop.stop_requested()) {
        Session s = Visit(players);
        {
          std::lock_guard lock(mu);
          sessions.push_back(std::move(s));
        }
        std::this_thread::sleep_for(5ms);
      }
    });
  }
  auto served_by = [&](const std::string& id, Clock::time_point after) {
    std::lock_guard lock(mu);
    for (const Session& s : sessions) {
      if (s.began >= after && s.ok && s.served_by == id) return true;
    }
    return false;
  };
  const Clock::time_point start = Clock::now();
  ASSERT_TRUE(Eventually([&] { return served_by("z1", start); }, 10s)) << "z1 never served";

  // Freeze z1 and watch the gateway take it out.
  std::this_thread::sleep_for(1s);
  const Clock::time_point frozen_at = Clock::now();
  ASSERT_TRUE(zones[0]->Freeze());
  Clock::time_point ejected_at{};
  const bool ejected = Eventually(
      [&] {
        const bool out = Healthy(admin, "z1") == 0;
        ejected_at = Clock::now();
        return out;
      },
      kEjectionBound + 5s, 20ms);
  // Held frozen while the players go on.
  std::this_thread::sleep_for(2s);
  const Clock::time_point thawed_at = Clock::now();
  zones[0]->Signal(SIGCONT);
  const bool healthy_again = Eventually([&] { return Healthy(admin, "z1") == 1; }, 10s, 20ms);
  const bool served_again = Eventually([&] { return served_by("z1", thawed_at); }, 10s, 20ms);
  std::this_thread::sleep_for(500ms);
  for (auto& l : loops) l.request_stop();
  loops.clear();  // joined

  // Sessions by phase, by when they began (the pick happens after the connect).
  int before_freeze = 0, failed_before_freeze = 0;
  int before_ejection = 0, failed_before_ejection = 0;
  int while_ejected = 0, failed_while_ejected = 0, to_frozen_while_ejected = 0;
  int after_thaw = 0, failed_after_thaw = 0, to_thawed = 0;
  double longest_failure_ms = 0;
  std::map<std::string, int> by_instance;
  for (const Session& s : sessions) {
    const bool failed = !s.ok;
    if (failed) {
      longest_failure_ms = std::max(
          longest_failure_ms, std::chrono::duration<double, std::milli>(s.ended - s.began).count());
    }
    if (s.ok) ++by_instance[s.served_by];
    const bool on_z1 = s.served_by == "z1";
    // A session still open at the freeze belongs to the freeze: it may have been on z1.
    if (s.ended < frozen_at) {
      ++before_freeze;
      failed_before_freeze += failed;
    } else if (s.began < ejected_at) {
      ++before_ejection;
      failed_before_ejection += failed;
    } else if (s.began < thawed_at) {
      ++while_ejected;
      failed_while_ejected += failed;
      to_frozen_while_ejected += on_z1;
    } else {
      ++after_thaw;
      failed_after_thaw += failed;
      to_thawed += on_z1 && s.ok;
    }
  }
  const auto ms = [](Clock::duration d) {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  };
  std::printf(
      "backend freeze: z1 SIGSTOPped, taken out of routing %lld ms later (bound %lld ms), "
      "SIGCONTed after %lld ms frozen; %zu sessions: before the freeze %d (%d failed), freeze to "
      "ejection %d (%d failed, cut by the response timeout; longest failure %.0f ms), while "
      "ejected %d (%d failed, %d to the frozen one), after the thaw %d (%d failed, %d served by "
      "z1); served: z1=%d z2=%d z3=%d\n",
      ms(ejected_at - frozen_at), ms(kEjectionBound), ms(thawed_at - frozen_at), sessions.size(),
      before_freeze, failed_before_freeze, before_ejection, failed_before_ejection,
      longest_failure_ms, while_ejected, failed_while_ejected, to_frozen_while_ejected, after_thaw,
      failed_after_thaw, to_thawed, by_instance["z1"], by_instance["z2"], by_instance["z3"]);

  ASSERT_TRUE(ejected) << "the gateway never took the frozen z1 out of routing";
  EXPECT_LE(ejected_at - frozen_at, kEjectionBound);
  EXPECT_EQ(failed_before_freeze, 0);
  EXPECT_GT(while_ejected, 20) << "too few sessions while z1 was out to judge by";
  EXPECT_EQ(failed_while_ejected, 0) << "a session failed after the frozen backend was ejected";
  EXPECT_EQ(to_frozen_while_ejected, 0);
  EXPECT_TRUE(healthy_again) << "z1 never passed its checks again after SIGCONT";
  EXPECT_TRUE(served_again) << "z1 never got a new session after SIGCONT";
  EXPECT_EQ(failed_after_thaw, 0);
  EXPECT_LT(longest_failure_ms, 5000) << "a session caught on the frozen backend hung";
}

}  // namespace
