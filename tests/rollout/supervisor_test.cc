// The Supervisor with real child processes (RO-1): start, crash and restart with back-off, give
// up, bounded events, stop with escalation, and its own restart -- clean or SIGKILL -- without
// orphans or duplicates.
#include "rollout/supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <thread>

#include "common/procfs.h"
#include "testing/eventually.h"
#include "testing/temp_dir.h"

namespace drover::rollout {
namespace {

using namespace std::chrono_literals;

LaunchSpec Shell(const std::string& id, const std::string& script) {
  LaunchSpec spec;
  spec.service = "svc";
  spec.id = id;
  spec.version = "v1";
  spec.argv = {"/bin/sh", "-c", script};
  return spec;
}

struct Proc {
  int pid = 0;
  int pgid = 0;
  std::string instance;  // DROVER_INSTANCE_ID
};

// Every live (not zombie) process with a DROVER_INSTANCE_ID.
std::vector<Proc> InstanceProcesses() {
  std::vector<Proc> out;
  for (const int pid : procfs::Pids()) {
    const auto stat = procfs::StatOf(pid);
    if (!stat || stat->state == 'Z') continue;
    std::string instance = procfs::EnvValue(pid, "DROVER_INSTANCE_ID");
    if (!instance.empty()) out.push_back(Proc{pid, stat->pgrp, std::move(instance)});
  }
  return out;
}

// Copies of an instance running: process groups led by a process of that instance.
int CopiesOf(const std::string& id) {
  int copies = 0;
  for (const Proc& p : InstanceProcesses()) copies += p.instance == id && p.pid == p.pgid;
  return copies;
}

// Processes of `id` in any process group other than `pgid` (leftovers of an older copy).
int StraysOf(const std::string& id, int pgid) {
  int strays = 0;
  for (const Proc& p : InstanceProcesses()) strays += p.instance == id && p.pgid != pgid;
  return strays;
}

std::optional<InstanceInfo> Find(Supervisor& s, const std::string& id) {
  auto list = s.List("");
  if (!list.ok()) return std::nullopt;
  for (auto& i : *list) {
    if (i.spec.id == id) return i;
  }
  return std::nullopt;
}

class SupervisorTest : public ::testing::Test {
 protected:
  std::unique_ptr<Supervisor> Open(SupervisorOptions options = {}) {
    options.data_dir = dir_.path() + "/agent";
    options.backoff_initial = 20ms;
    options.backoff_max = 200ms;
    auto s = Supervisor::Open(options, clock_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  // A supervisor in a child process (for the test to SIGKILL): opens on this test's data
  // directory, starts `spec`, runs `then`, exits.
  pid_t ForkSupervisor(const LaunchSpec& spec, const std::function<void(Supervisor&)>& then) {
    const pid_t pid = ::fork();
    if (pid != 0) return pid;
    RealClock clock;
    SupervisorOptions options;
    options.data_dir = dir_.path() + "/agent";
    auto s = Supervisor::Open(options, clock);
    if (!s.ok() || !(*s)->Start(spec).ok()) ::_exit(1);
    then(**s);
    ::_exit(0);
  }
  testing::TempDir dir_;
  RealClock clock_;
};

TEST_F(SupervisorTest, RunsAnInstanceWithItsIdentityAndStopsIt) {
  auto s = Open();
  LaunchSpec spec =
      Shell("i1", "echo \"$DROVER_INSTANCE_ID $DROVER_SERVICE $DROVER_VERSION $X\"; exec sleep 30");
  spec.env["X"] = "x-{id}";
  ASSERT_TRUE(s->Start(spec).ok());
  EXPECT_EQ(s->Start(spec).code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(testing::Eventually([&] {
    auto i = Find(*s, "i1");
    return i && i->status == InstanceStatus::kRunning && i->pid > 0;
  }));
  const int pid = Find(*s, "i1")->pid;
  ASSERT_TRUE(testing::Eventually([&] {
    std::ifstream log(dir_.path() + "/agent/logs/i1.log");
    std::string line;
    return std::getline(log, line) && line == "i1 svc v1 x-i1";
  }));
  ASSERT_TRUE(s->Stop("i1", 5s).ok());
  EXPECT_FALSE(Find(*s, "i1"));
  EXPECT_NE(::kill(pid, 0), 0);  // gone, and reaped
  EXPECT_EQ(s->Stop("i1", 1s).code(), StatusCode::kNotFound);
  EXPECT_EQ(s->Start(Shell("bad id", "true")).code(), StatusCode::kInvalidArgument);
}

TEST_F(SupervisorTest, ACrashLoopBacksOffGivesUpAndKeepsOnlyTheNewestEvents) {
  SupervisorOptions options;
  options.max_restarts = 3;
  auto s = Open(options);
  ASSERT_TRUE(s->Start(Shell("loop", "exit 3")).ok());
  ASSERT_TRUE(testing::Eventually(
      [&] { return Find(*s, "loop")->status == InstanceStatus::kGaveUp; }, 10s));
  const InstanceInfo info = *Find(*s, "loop");
  ASSERT_EQ(info.events.size(), 5u);  // 4 starts and 4 crashes and a give-up happened
  EXPECT_EQ(info.events.back().kind, EventKind::kGaveUp);
  EXPECT_NE(info.events.back().detail.find("gave up after 4 crashes"), std::string::npos);
  EXPECT_EQ(info.events[info.events.size() - 2].kind, EventKind::kCrashed);
  EXPECT_NE(info.events[info.events.size() - 2].detail.find("exited with code 3"),
            std::string::npos);
  // Back-off between restarts: 20, 40, 80 ms -- the start events are spread out.
  for (std::size_t i = 1; i < info.events.size(); ++i) {
    EXPECT_GE(info.events[i].at, info.events[i - 1].at);
  }
  // A program that does not exist is a crash too (exit 127), not a hang.
  ASSERT_TRUE(s->Start(Shell("missing", "exec /nonexistent/program")).ok());
  ASSERT_TRUE(testing::Eventually(
      [&] { return Find(*s, "missing")->status == InstanceStatus::kGaveUp; }, 10s));
}

// A program the host cannot run is refused at Start, with the reason -- not started into a crash
// loop whose cause only its log shows.
TEST_F(SupervisorTest, AProgramThatCannotRunIsRefusedAtStart) {
  auto s = Open();
  LaunchSpec spec = Shell("ghost", "");
  spec.argv = {"/no/such/{version}/binary", "--flag"};
  const Status refused = s->Start(spec);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.message(), "cannot run /no/such/v1/binary: No such file or directory");
  EXPECT_FALSE(Find(*s, "ghost").has_value());  // not recorded
}

// The program goes away between restarts: the exec's refusal is for good, so the agent gives up
// at once with the reason (no back-off loop), and the gate's message says it could not start.
TEST_F(SupervisorTest, AProgramGoneBeforeARestartIsGivenUpOnWithTheReason) {
  const std::string program = dir_.path() + "/release-sh";
  std::filesystem::copy_file("/bin/sh", program);
  auto s = Open();
  LaunchSpec spec = Shell("gone", "sleep 0.2; exit 3");
  spec.argv.front() = program;
  ASSERT_TRUE(s->Start(spec).ok());
  ASSERT_TRUE(testing::Eventually([&] { return Find(*s, "gone")->pid > 0; }));
  std::filesystem::remove(program);
  ASSERT_TRUE(testing::Eventually(
      [&] { return Find(*s, "gone")->status == InstanceStatus::kGaveUp; }, 10s));
  const InstanceInfo info = *Find(*s, "gone");
  ASSERT_FALSE(info.events.empty());
  EXPECT_EQ(info.events.back().kind, EventKind::kGaveUp);
  EXPECT_EQ(info.events.back().detail, "cannot run " + program + ": No such file or directory");
  // One exit, one refused exec: no restart loop.
  EXPECT_EQ(std::count_if(info.events.begin(), info.events.end(),
                          [](const InstanceEvent& e) { return e.kind == EventKind::kStarted; }),
            1);
}

TEST_F(SupervisorTest, StopKillsWhatIgnoresSigterm) {
  auto s = Open();
  ASSERT_TRUE(s->Start(Shell("stubborn", "trap '' TERM; while true; do sleep 0.05; done")).ok());
  ASSERT_TRUE(testing::Eventually([&] { return Find(*s, "stubborn")->pid > 0; }));
  std::this_thread::sleep_for(100ms);  // the trap is set
  const auto before = std::chrono::steady_clock::now();
  ASSERT_TRUE(s->Stop("stubborn", 300ms).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - before, 300ms);
  EXPECT_EQ(CopiesOf("stubborn"), 0);
}

// "{host}", "{port}" and "{health_port}" are this host's to fill, once: the instance and a
// restarted agent run the same filled spec, so the instance keeps its ports.
TEST_F(SupervisorTest, FillsHostPlaceholdersOnceAndKeepsThemAcrossItsRestart) {
  SupervisorOptions options;
  options.host = "127.0.0.2";
  std::string filled;
  {
    auto s = Open(options);
    LaunchSpec spec = Shell("p1", "echo \"$ADDR\"; exec sleep 30");
    spec.env["ADDR"] = "{host}:{port}/{health_port}";
    ASSERT_TRUE(s->Start(spec).ok());
    filled = Find(*s, "p1")->spec.env.at("ADDR");
    EXPECT_TRUE(std::regex_match(filled, std::regex(R"(127\.0\.0\.2:[1-9]\d*/[1-9]\d*)")))
        << filled;
    ASSERT_TRUE(testing::Eventually([&] {
      std::ifstream log(dir_.path() + "/agent/logs/p1.log");
      std::string line;
      return std::getline(log, line) && line == filled;
    }));
  }
  auto again = Open(options);
  ASSERT_TRUE(Find(*again, "p1"));
  EXPECT_EQ(Find(*again, "p1")->spec.env.at("ADDR"), filled);
}

TEST_F(SupervisorTest, ACleanRestartStartsTheSameInstancesOnce) {
  {
    auto s = Open();
    ASSERT_TRUE(s->Start(Shell("a", "exec sleep 30")).ok());
    ASSERT_TRUE(s->Start(Shell("b", "exec sleep 30")).ok());
    ASSERT_TRUE(s->Start(Shell("c", "exec sleep 30")).ok());
    ASSERT_TRUE(testing::Eventually([&] { return CopiesOf("a") == 1 && CopiesOf("b") == 1; }));
    ASSERT_TRUE(s->Stop("c", 5s).ok());  // no longer wanted: not restarted below
  }
  EXPECT_EQ(CopiesOf("a"), 0);  // a clean shutdown stops what it runs
  auto s = Open();
  ASSERT_TRUE(testing::Eventually([&] { return CopiesOf("a") == 1 && CopiesOf("b") == 1; }));
  EXPECT_EQ(s->List("svc")->size(), 2u);
  EXPECT_EQ(CopiesOf("c"), 0);
}

TEST_F(SupervisorTest, AKilledSupervisorLeavesNoOrphanAndItsSuccessorNoDuplicate) {
  // The first supervisor runs in a child process, which is then SIGKILLed.
  const pid_t agent = ForkSupervisor(Shell("k", "trap 'sleep 0.3; exit 0' TERM; sleep 30 & wait"),
                                     [](Supervisor&) { ::pause(); });
  ASSERT_GT(agent, 0);
  ASSERT_TRUE(testing::Eventually([&] { return CopiesOf("k") >= 1; }));
  std::this_thread::sleep_for(200ms);  // the trap is set
  ::kill(agent, SIGKILL);
  ::waitpid(agent, nullptr, 0);
  // Its successor waits for the old copy (which got SIGTERM from the kernel and takes 0.3 s to
  // leave), then starts exactly one.
  auto s = Open();
  ASSERT_TRUE(testing::Eventually([&] {
    auto i = Find(*s, "k");
    return i && i->status == InstanceStatus::kRunning;
  }));
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(CopiesOf("k"), 1);
  // Not even the old copy's own child (its `sleep`) is left behind.
  EXPECT_EQ(StraysOf("k", Find(*s, "k")->pid), 0);
}

TEST_F(SupervisorTest, ASecondSupervisorOnTheSameDirectoryIsRefusedAndTouchesNothing) {
  auto s = Open();
  ASSERT_TRUE(s->Start(Shell("only", "exec sleep 30")).ok());
  ASSERT_TRUE(testing::Eventually([&] { return Find(*s, "only")->pid > 0; }));
  const int pid = Find(*s, "only")->pid;
  SupervisorOptions options;
  options.data_dir = dir_.path() + "/agent";
  auto second = Supervisor::Open(options, clock_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("another drover agent is using"), std::string::npos)
      << second.status().message();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(Find(*s, "only")->pid, pid);  // not stopped, not restarted
  EXPECT_EQ(CopiesOf("only"), 1);
}

TEST_F(SupervisorTest, WhatAnInstanceStartedInItsGroupGoesWithIt) {
  SupervisorOptions options;
  options.max_restarts = 0;  // the first crash is the last
  auto s = Open(options);
  ASSERT_TRUE(s->Start(Shell("forks", "sleep 31 & sleep 32 & sleep 0.2; exit 1")).ok());
  ASSERT_TRUE(testing::Eventually(
      [&] { return Find(*s, "forks")->status == InstanceStatus::kGaveUp; }, 10s));
  // The two sleeps shared the crashed shell's process group: killed with it.
  EXPECT_TRUE(testing::Eventually([&] {
    int left = 0;
    for (const Proc& p : InstanceProcesses()) left += p.instance == "forks";
    return left == 0;
  }));
}

TEST_F(SupervisorTest, AnInstanceBeingStoppedWhenTheSupervisorDiesIsStoppedByItsSuccessor) {
  const std::string data = dir_.path() + "/agent";
  // Ignores SIGTERM (also the one the kernel sends when this supervisor dies).
  const pid_t agent = ForkSupervisor(Shell("slow", "trap '' TERM; while true; do sleep 0.05; done"),
                                     [](Supervisor& s) {
                                       std::this_thread::sleep_for(300ms);
                                       (void)s.Stop("slow", 60s);  // killed during this wait
                                     });
  ASSERT_GT(agent, 0);
  ASSERT_TRUE(testing::Eventually([&] { return CopiesOf("slow") == 1; }));
  ASSERT_TRUE(testing::Eventually([&] {
    std::ifstream state(data + "/instances.json");
    std::string text((std::istreambuf_iterator<char>(state)), std::istreambuf_iterator<char>());
    return text.find("\"stopping\":true") != std::string::npos;
  }));
  ::kill(agent, SIGKILL);
  ::waitpid(agent, nullptr, 0);
  ASSERT_EQ(CopiesOf("slow"), 1);  // the orphan, still running
  SupervisorOptions options;
  options.adopt_wait = 300ms;
  auto s = Open(options);
  // SIGKILLed by the successor (it ignores SIGTERM); the kernel finishes it a moment later.
  EXPECT_TRUE(testing::Eventually([] { return CopiesOf("slow") == 0; }, 2s))
      << "the successor must finish the stop";
  EXPECT_FALSE(Find(*s, "slow")) << "and must not start it again";
}

}  // namespace
}  // namespace drover::rollout
