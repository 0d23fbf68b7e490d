// The gateway benchmark, small: Drover, HAProxy and nginx must all carry every TCP session and
// every HTTP request of a short run without an error. Speed is not checked here.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/run_command.h"

namespace {

TEST(GatewayBenchTest, EveryProxyCarriesEverySession) {
  auto run = drover::testing::RunCommand(
      std::string(GATEWAY_BENCH) +
          " --json --clients 4 --seconds 0.3 --upstreams 2 --http-connections 4 --http-seconds 1",
      /*with_stderr=*/false);
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto start = run.out.find('{');
  ASSERT_NE(start, std::string::npos) << run.out;
  const auto report = nlohmann::json::parse(run.out.substr(start), nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << run.out;
  for (const char* part : {"tcp", "http"}) {
    for (const char* system : {"drover", "haproxy", "nginx"}) {
      SCOPED_TRACE(std::string(part) + " " + system);
      const auto& r = report.at(part).at(system);
      EXPECT_FALSE(r.at("skipped").get<bool>());  // scripts/setup.sh installs both peers and wrk
      EXPECT_EQ(r.at("errors"), 0);
      EXPECT_GT(r.at("count").get<int>(), 0);
    }
    EXPECT_GT(report[part]["haproxy"].at("drover_rate_ratio").get<double>(), 0);
  }
}

}  // namespace
