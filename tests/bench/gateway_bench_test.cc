// The gateway benchmark, small: Drover, HAProxy and nginx must all carry every TCP session and
// every HTTP request of a short run without an error, and hold idle sessions for the memory
// figure. Speed and memory are not checked here.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/file_tail.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace {

TEST(GatewayBenchTest, EveryProxyCarriesEverySession) {
  // The report is stdout; what the bench and its peers log goes to a file, shown on a failure.
  drover::testing::TempDir dir;
  const std::string log = dir.path() + "/stderr.log";
  auto run = drover::testing::RunCommand(
      "(" + std::string(GATEWAY_BENCH) +
          " --json --threads 1 --rounds 1 --clients 4 --seconds 0.3 --upstreams 2"
          " --http-connections 4 --http-seconds 1 --idle-sessions 200 --idle-http-clients 200 2>" +
          log + ")",
      /*with_stderr=*/false);
  ASSERT_EQ(run.exit_code, 0) << run.out << "\nstderr:\n" << drover::testing::Tail(log, 40);
  const auto start = run.out.find('{');
  ASSERT_NE(start, std::string::npos) << run.out;
  const auto report = nlohmann::json::parse(run.out.substr(start), nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << run.out;
  const auto& pass = report.at("threads_1");
  for (const char* part : {"tcp", "http_keepalive", "http_close", "http_1mib"}) {
    for (const char* system : {"drover", "haproxy", "nginx"}) {
      SCOPED_TRACE(std::string(part) + " " + system);
      const auto& r = pass.at(part).at(system);
      EXPECT_FALSE(r.at("skipped").get<bool>());  // scripts/setup.sh installs both peers and wrk
      EXPECT_EQ(r.at("errors"), 0);
      EXPECT_GT(r.at("count").get<int>(), 0);
      EXPECT_GT(r.at("rate_per_s").get<double>(), 0);
      // Each round says what the scheduler did with the proxy: it ran (CPU time per request or
      // session, from /proc) and may have been preempted or kept waiting for a CPU.
      ASSERT_EQ(r.at("rounds").size(), 1u) << r.dump();
      const auto& round = r.at("rounds")[0];
      EXPECT_EQ(round.at("rate_per_s"), r.at("rate_per_s"));
      EXPECT_GT(round.at("cpu_us_per_op").get<double>(), 0);
      EXPECT_GE(round.at("preempted").get<double>(), 0);
      EXPECT_GE(round.at("cpu_wait_ms").get<double>(), 0);
    }
    EXPECT_GT(pass[part]["haproxy"].at("drover_rate_ratio").get<double>(), 0);
  }
  // Idle memory: every proxy held every connection (no note), and a cost was measured.
  for (const char* part : {"idle_tcp", "idle_http"}) {
    for (const char* system : {"drover", "haproxy", "nginx"}) {
      SCOPED_TRACE(std::string(part) + " " + system);
      const auto& r = pass.at(part).at(system);
      EXPECT_FALSE(r.contains("note")) << r.dump();
      EXPECT_GE(r.at("bytes_per_session").get<double>(), 0);
    }
  }
  // A verdict for every goal, each judged against the peers its goal names: rates against both,
  // p99 and idle memory against HAProxy only.
  const auto& verdicts = report.at("verdicts");
  EXPECT_EQ(verdicts.size(), 7u) << verdicts.dump();
  for (const auto& [figure, v] : verdicts.items()) {
    SCOPED_TRACE(figure);
    EXPECT_TRUE(v.contains("haproxy") && v.contains("met")) << v.dump();
    const bool haproxy_only =
        figure.find("p99") != std::string::npos || figure.find("memory") != std::string::npos;
    EXPECT_EQ(v.contains("nginx"), !haproxy_only) << v.dump();
  }
}

}  // namespace
