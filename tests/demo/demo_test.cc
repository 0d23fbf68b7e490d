// `drover demo --exit --report FILE` end to end (UX-1): the real binary starts its registry,
// agent, gateway and sample servers, replays the five incidents and writes its report; the test
// checks the report's figures against their bounds, and that no process of the demo outlives it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "testing/processes.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace {

using json = nlohmann::json;

const json& Step(const json& report, int number) {
  for (const json& s : report.at("steps")) {
    if (s.at("number") == number) return s;
  }
  static const json none;
  ADD_FAILURE() << "no step " << number << " in the report";
  return none;
}

TEST(DemoTest, ReplaysTheFiveIncidentsWithinTheirBounds) {
  drover::testing::TempDir dir;
  const std::string data = dir.path() + "/demo-data";
  const std::string report_path = dir.path() + "/report.json";
  // `timeout` bounds the run; the demo stops its children on SIGTERM.
  const auto run =
      drover::testing::RunCommand(std::string("timeout -s TERM 240 ") + DROVER_BINARY +
                                  " demo --exit --data-dir " + data + " --report " + report_path);
  std::cout << run.out << std::endl;
  ASSERT_EQ(run.exit_code, 0) << "the demo failed; its children's logs are in " << data << "/logs";
  // (The demo's data dir is in every child's command line.)
  EXPECT_EQ(drover::testing::ProcessesWith(data).size(), 0u) << "a process of the demo outlived it";

  std::ifstream in(report_path);
  const json report = json::parse(in, nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << "the report is not JSON";
  EXPECT_TRUE(report.at("ok").get<bool>());
  // Only the crashing release's own processes may drop players (step 5).
  EXPECT_EQ(report.at("players").at("connect_failed"), 0);
  EXPECT_GT(report.at("players").at("sessions").get<int>(), 500);

  // 1: the rolling deploy passed; no player failed to connect or lost a session.
  const json& rolling = Step(report, 1).at("figures");
  EXPECT_EQ(rolling.at("verdict"), "PASS");
  EXPECT_EQ(rolling.at("players").at("failed_connections"), 0);
  EXPECT_EQ(rolling.at("players").at("broken"), 0);
  EXPECT_GT(rolling.at("players").at("sessions").get<int>(), 100);
  EXPECT_LT(rolling.at("new_share_slow_start").get<double>(), 0.5);

  // 2: the failed job is terminal, and seen within its bound.
  const json& jobs = Step(report, 2).at("figures");
  EXPECT_EQ(jobs.at("outcome"), "step_error");
  EXPECT_LE(jobs.at("failure_seen_ms").get<double>(), jobs.at("bound_ms").get<double>());
  EXPECT_EQ(jobs.at("incident_waiter_status"), "in progress");

  // 3: a fifth running server behind the gateway takes about a fifth of the keys (measured from
  // real sessions, every one answered), within 1.1x of ideal; hash % n far from it; the hot key
  // spreads over several servers; bounded load caps the computed Zipf peak.
  const json& shard = Step(report, 3).at("figures");
  EXPECT_EQ(shard.at("unanswered_sessions"), 0);
  EXPECT_GT(shard.at("keys_moved").get<int>(), 0);
  EXPECT_LE(shard.at("maglev_moved_vs_ideal").get<double>(), 1.1);
  EXPECT_GT(shard.at("modn_moved_vs_ideal").get<double>(), 3.0);
  EXPECT_GE(shard.at("hot_key_servers").get<int>(), 2);
  EXPECT_LT(shard.at("hot_peak_to_mean_bounded").get<double>(),
            shard.at("hot_peak_to_mean_unbounded").get<double>());

  // 4: one address pins one server; the Drover channel spreads and picks up new servers.
  const json& grpc = Step(report, 4).at("figures");
  EXPECT_EQ(grpc.at("pinned_max_on_one_server"), 60);
  EXPECT_TRUE(grpc.at("balanced_even").get<bool>());
  ASSERT_EQ(grpc.at("new_servers_first_call_s").size(), 2u);
  for (const auto& [id, s] : grpc.at("new_servers_first_call_s").items()) {
    EXPECT_LE(s.get<double>(), grpc.at("pickup_bound_s").get<double>()) << id;
  }
  EXPECT_EQ(grpc.at("pinned_calls_to_new_servers"), 0);

  // 5: the crash-looping release is rejected and rolled back with no failed connection.
  const json& crash = Step(report, 5).at("figures");
  EXPECT_EQ(crash.at("verdict"), "FAIL");
  EXPECT_NE(crash.at("reason").get<std::string>().find("crash"), std::string::npos)
      << crash.at("reason");
  EXPECT_EQ(crash.at("players").at("connect_failed"), 0);
  EXPECT_EQ(crash.at("previous_ready_after"), 3);
}

TEST(DemoTest, BadFlagsFailBeforeStartingAnything) {
  const auto run =
      drover::testing::RunCommand(std::string(DROVER_BINARY) + " demo --rate 0 --exit");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.out.find("--rate"), std::string::npos) << run.out;
}

}  // namespace
