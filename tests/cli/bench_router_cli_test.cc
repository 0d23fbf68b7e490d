// `drover bench router --json` run as a real child process: the report parses, has the agreed
// members, and its exact (key-independent) figures meet the router's goals.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "testing/run_command.h"

namespace {

using ProcessRun = drover::testing::CommandResult;

// Runs drover with `args`; stderr is captured too when `with_stderr`.
ProcessRun RunDrover(const std::string& args, bool with_stderr = false) {
  return drover::testing::RunCommand(std::string(DROVER_BINARY) + " " + args, with_stderr);
}

TEST(BenchRouterCliTest, JsonReportHasAgreedMembersAndMeetsGoals) {
  const ProcessRun run = RunDrover("bench router --json --quiet --keys 20000 --timing-picks 5000");
  ASSERT_EQ(run.exit_code, 0);
  const auto report = nlohmann::json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(report.is_discarded()) << run.out;

  EXPECT_EQ(report["n"], 100);
  EXPECT_EQ(report["keys"], 20000);
  for (const char* algo : {"modn", "ring", "maglev"}) {
    ASSERT_TRUE(report["movement"][algo].contains("add")) << algo;
    ASSERT_TRUE(report["movement"][algo].contains("remove")) << algo;
  }
  for (const char* m : {"ring_100", "ring_256", "maglev", "bounded_uniform", "bounded_zipf"}) {
    ASSERT_TRUE(report["peak_to_mean"][m].is_number()) << m;
  }
  for (const char* p : {"ring", "maglev", "bounded", "p2c"}) {
    ASSERT_TRUE(report["pick_ns"][p].is_number()) << p;
    EXPECT_GT(report["pick_ns"][p].get<double>(), 0.0) << p;
  }

  // Exact figures do not depend on the generated keys.
  EXPECT_LE(report["movement"]["ring"]["add_exact"].get<double>(), 1.10);
  EXPECT_LE(report["movement"]["ring"]["remove_exact"].get<double>(), 1.10);
  EXPECT_LE(report["movement"]["maglev"]["add_exact"].get<double>(), 1.30);
  EXPECT_LE(report["movement"]["maglev"]["remove_exact"].get<double>(), 1.30);
  EXPECT_GE(report["movement"]["modn"]["add"].get<double>(), 80.0);  // ~N times the ideal
  EXPECT_LE(report["peak_to_mean"]["ring_256"].get<double>(), 1.25);
  EXPECT_LE(report["peak_to_mean"]["maglev"].get<double>(), 1.02);
  // Bounded load's cap is a ceiling: at most c plus one unit over the mean of 200 keys.
  EXPECT_LE(report["peak_to_mean"]["bounded_zipf"].get<double>(), 1.25 + 1.0 / 200);
  EXPECT_LE(report["peak_to_mean"]["bounded_uniform"].get<double>(), 1.25 + 1.0 / 200);
  // Without the bound, the Zipf stream's hottest key alone overloads one endpoint.
  EXPECT_GT(report["peak_to_mean"]["ring_zipf_unbounded"].get<double>(), 2.0);
}

TEST(BenchRouterCliTest, RejectsBadOptionsWithAClearError) {
  const ProcessRun keys = RunDrover("bench router --keys 5", true);
  EXPECT_EQ(keys.exit_code, 2);
  EXPECT_NE(keys.out.find("--keys: Value 5 not in range"), std::string::npos) << keys.out;
  const ProcessRun c = RunDrover("bench router --bounded-c 0.5", true);
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_NE(c.out.find("--bounded-c"), std::string::npos) << c.out;
  const ProcessRun level = RunDrover("--log-level loud bench router --keys 1000", true);
  EXPECT_EQ(level.exit_code, 2);
  EXPECT_NE(level.out.find("trace, debug, info"), std::string::npos) << level.out;
  const ProcessRun none = RunDrover("", true);
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.out.find("a command is needed"), std::string::npos) << none.out;
}

TEST(BenchRouterCliTest, HelpExplainsTheReport) {
  const ProcessRun run = RunDrover("bench router --help");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(run.out.find("--json"), std::string::npos);
  EXPECT_NE(run.out.find("Key movement"), std::string::npos);
}

}  // namespace
