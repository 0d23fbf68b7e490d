// The registry benchmark, small: it must run end to end against a real registry (on SQLite and on
// an etcd store) and a real etcd, deliver every watched event and make no failed request. Speed
// is not checked here. More watchers than the registry admits from one client address by
// default (64): the benchmark must raise that limit, as its full size (1,000) needs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

#include "testing/run_command.h"

namespace {

// Runs the bench with `args` (after --json) and returns its report; a discarded value (with a
// test failure saying why) when it failed or printed none.
nlohmann::json RunBench(const std::string& args) {
  auto run = drover::testing::RunCommand(std::string(REGISTRY_BENCH) + " --json " + args);
  if (run.exit_code != 0) {
    ADD_FAILURE() << "exit code " << run.exit_code << ": " << run.out;
    return nlohmann::json::value_t::discarded;
  }
  // The report is the JSON object that starts a line (etcd may log lines holding braces).
  const auto start = run.out.starts_with("{\n") ? 0 : run.out.find("\n{\n");
  if (start == std::string::npos) {
    ADD_FAILURE() << "no report: " << run.out;
    return nlohmann::json::value_t::discarded;
  }
  auto report = nlohmann::json::parse(run.out.substr(start), nullptr, false);
  if (report.is_discarded()) ADD_FAILURE() << "a report that is not JSON: " << run.out;
  return report;
}

TEST(RegistryBenchTest, RunsAgainstDroverAndEtcdAndLosesNothing) {
  const auto report = RunBench(
      "--clients 8 --connections 2 --seconds 0.3 --instances 300 --watchers 70 "
      "--watch-connections 2 --writes 20 --warmup-writes 2 --interval-ms 10 --batch 5 "
      "--restart-instances 500 --idle-watchers 70");
  ASSERT_FALSE(report.is_discarded());
  EXPECT_EQ(report.at("idle_watchers"), 70);
  for (const char* system : {"drover", "drover_etcd", "etcd"}) {
    SCOPED_TRACE(system);
    const auto& f = report.at(system);
    EXPECT_EQ(f.at("errors"), 0);
    EXPECT_GT(f.at("registrations_per_s").get<double>(), 0);
    // Over HTTP too (Drover's API; etcd's JSON gateway), every one answered 200 (errors above).
    EXPECT_GT(f.at("http_registrations_per_s").get<double>(), 0);
    EXPECT_GT(f.at("keepalive_per_s").get<double>(), 0);
    EXPECT_EQ(f.at("watch_samples"), 70 * 20);  // every measured write, at every watcher
    EXPECT_EQ(f.at("watch_missing"), 0);
    // Also timed from each write's acknowledgement (the commit done): never later than from
    // its sending.
    EXPECT_LE(f.at("watch_after_ack_p50_ms").get<double>(), f.at("watch_p50_ms").get<double>());
    // Memory per instance and per watch stream is measured for every system (its size is not
    // checked: a few hundred instances, or 70 streams, may fit in pages the process already had,
    // and etcd's garbage collector may hand memory back in between: -18 KB per stream was seen).
    EXPECT_TRUE(f.at("rss_per_instance_b").is_number());
    EXPECT_TRUE(f.at("rss_per_watcher_b").is_number());
  }
  // The SQLite registry and etcd, restarted with 500 stored, list (count) them all.
  for (const char* system : {"drover", "etcd"}) {
    SCOPED_TRACE(system);
    EXPECT_GT(report[system].at("restart_s").get<double>(), 0);
  }
  for (const char* system : {"drover", "drover_etcd"}) {
    SCOPED_TRACE(system);
    EXPECT_GT(report[system].at("batched_heartbeats_per_s").get<double>(), 0);
    EXPECT_EQ(report[system].at("http_watch_samples"), 70 * 20);
    // Read through io_uring where the kernel allows it, else through epoll.
    EXPECT_THAT(report[system].at("http_watch_reader").get<std::string>(),
                ::testing::AnyOf("io_uring", "epoll"));
    // By a thread per CPU.
    EXPECT_EQ(report[system].at("http_watch_threads"),
              std::max(1u, std::thread::hardware_concurrency()));
    // Every registration counted in the registry's commit metrics, in at most one commit each.
    EXPECT_EQ(report[system].at("committed_writes"), 300);
    EXPECT_GE(report[system].at("store_commits").get<double>(), 1);
    EXPECT_LE(report[system].at("store_commits").get<double>(), 300);
  }
}

// The HTTP watchers' other reader (epoll and a recv() per ready stream) sees every event too, with
// the streams shared by as many threads as asked.
TEST(RegistryBenchTest, HttpWatchersReadWithEpollWhenAsked) {
  const auto report = RunBench(
      "--etcd off --stores sqlite --clients 4 --connections 1 --seconds 0.2 --instances 100 "
      "--watchers 40 --watch-connections 2 --writes 15 --warmup-writes 2 --interval-ms 10 "
      "--rounds 1 --restart-instances 0 --idle-watchers 2 --http-watch-reader epoll "
      "--http-watch-threads 3");
  ASSERT_FALSE(report.is_discarded());
  const auto& drover = report.at("drover");
  EXPECT_EQ(drover.at("http_watch_reader"), "epoll");
  EXPECT_EQ(drover.at("http_watch_threads"), 3);
  EXPECT_EQ(drover.at("http_watch_samples"), 40 * 15);
  EXPECT_EQ(drover.at("http_watch_missing"), 0);
}

}  // namespace
