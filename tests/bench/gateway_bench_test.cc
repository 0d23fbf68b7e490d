// The gateway benchmark, small: Drover, HAProxy and nginx must all carry every session of a short
// run without an error. Speed is not checked here.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/run_command.h"

namespace {

TEST(GatewayBenchTest, EveryProxyCarriesEverySession) {
  auto run = drover::testing::RunCommand(
      std::string(GATEWAY_BENCH) + " --json --clients 4 --seconds 0.3 --upstreams 2",
      /*with_stderr=*/false);
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto start = run.out.find('{');
  ASSERT_NE(start, std::string::npos) << run.out;
  const auto report = nlohmann::json::parse(run.out.substr(start), nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << run.out;
  for (const char* system : {"drover", "haproxy", "nginx"}) {
    SCOPED_TRACE(system);
    const auto& r = report.at(system);
    EXPECT_FALSE(r.at("skipped").get<bool>());  // scripts/setup.sh installs both peers
    EXPECT_EQ(r.at("errors"), 0);
    EXPECT_GT(r.at("sessions").get<int>(), 0);
  }
  EXPECT_GT(report["haproxy"].at("drover_rate_ratio").get<double>(), 0);
}

}  // namespace
