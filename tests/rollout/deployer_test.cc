// The deploy controller over an in-memory platform and readiness: the order of starts and stops,
// the rollback on every failure path, the record written through the log, placeholders. The gate
// itself is tested in health_gate_test; the real processes in deploy_e2e_test.
#include "rollout/deployer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <thread>

#include "rollout/fake_platform.h"

namespace drover::rollout {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class DeployerTest : public ::testing::Test {
 protected:
  DeployerTest() : platform_(clock_) {}

  void SetUp() override {
    for (const char* id : {"zone-v1-1", "zone-v1-2"}) {
      ASSERT_TRUE(platform_.Start(LaunchSpec{"zone", id, "v1", {"/bin/zone"}, {}}).ok());
    }
  }

  DeploySpec Spec(const std::string& version) const {
    DeploySpec spec;
    spec.service = "zone";
    spec.version = version;
    spec.argv = {"/bin/zone",
                 "--id",
                 "{id}",
                 "--listen",
                 "127.0.0.1:{port}",
                 "--health",
                 "127.0.0.1:{health_port}"};
    spec.env = {{"ZONE_PORT", "{port}"}};
    spec.instances = 2;
    spec.gate = GateOptions{20ms, 10ms, 5s};
    spec.stop_grace = 1500ms;
    spec.poll = 2ms;
    return spec;
  }

  DeployOutcome Run(const DeploySpec& spec, std::stop_token stop = {}) {
    Deployer deployer(
        platform_,
        [this](const std::string& service) -> Result<std::map<std::string, bool>> {
          if (!registry_up_) return UnavailableError("registry down");
          std::map<std::string, bool> ready;
          const auto listed = platform_.List(service);
          for (const InstanceInfo& i : *listed) ready[i.spec.id] = true;
          return ready;
        },
        [this](const std::string& id, const nlohmann::json& record) {
          std::lock_guard lock(mu_);
          records_.emplace_back(id, record);
          return Status::Ok();
        },
        clock_,
        [this](const std::string& service, const std::string& id) -> Result<bool> {
          std::lock_guard lock(mu_);
          forgotten_.push_back(service + "/" + id);
          return stale_.count(id) > 0;
        });
    return deployer.Run(spec, stop);
  }

  RealClock clock_;
  FakePlatform platform_;
  bool registry_up_ = true;
  std::mutex mu_;
  std::vector<std::pair<std::string, nlohmann::json>> records_;
  std::set<std::string> stale_;         // ids the registry still holds after their stop
  std::vector<std::string> forgotten_;  // deregister calls, service/id
};

TEST_F(DeployerTest, APassingVersionStartsFirstThenStopsTheOldOneAtATime) {
  // Whenever an old instance is stopped, both new ones run: never zero serving instances.
  platform_.on_stop = [this](const std::string& id) {
    if (id.find("-v1-") == std::string::npos) return;
    const auto ids = platform_.ids();
    EXPECT_TRUE(ids.count("zone-v2-1") && ids.count("zone-v2-2")) << "stopping " << id;
  };
  const DeployOutcome out = Run(Spec("v2"));
  EXPECT_EQ(out.verdict, Verdict::kPass) << out.reason;
  EXPECT_THAT(out.reason, HasSubstr("no crash since deploy began"));
  EXPECT_THAT(platform_.calls(),
              ElementsAre("start zone-v1-1", "start zone-v1-2", "start zone-v2-1",
                          "start zone-v2-2", "stop zone-v1-1 1500", "stop zone-v1-2 1500"));
  EXPECT_THAT(platform_.ids(), ElementsAre("zone-v2-1", "zone-v2-2"));
  EXPECT_THAT(forgotten_, ElementsAre("zone/zone-v1-1", "zone/zone-v1-2"));
  EXPECT_GE(out.decided_after, 20ms);  // never before min_healthy
  EXPECT_EQ(out.record["verdict"], "pass");
  EXPECT_EQ(out.record["previous"]["versions"], nlohmann::json::array({"v1"}));
  // Recorded at the start, at the verdict and at the end, always under one id.
  ASSERT_GE(records_.size(), 3u);
  for (const auto& [id, record] : records_) EXPECT_EQ(id, out.id);
  EXPECT_EQ(records_.front().second["verdict"], "running");
  EXPECT_EQ(records_.back().second["verdict"], "pass");
  EXPECT_TRUE(records_.back().second.contains("finished_at_ms"));
}

TEST_F(DeployerTest, ACrashLoopIsRolledBackWithoutTouchingTheOldVersion) {
  platform_.crash_looping = {"zone-v2-2"};
  stale_ = {"zone-v2-2"};
  const DeployOutcome out = Run(Spec("v2"));
  EXPECT_EQ(out.verdict, Verdict::kFail);
  EXPECT_THAT(out.reason,
              HasSubstr("instance zone-v2-2 crashed repeatedly since deploy began and is still "
                        "restarting"));
  EXPECT_THAT(platform_.calls(),
              ElementsAre("start zone-v1-1", "start zone-v1-2", "start zone-v2-1",
                          "start zone-v2-2", "stop zone-v2-1 1500", "stop zone-v2-2 1500"));
  EXPECT_THAT(platform_.ids(), ElementsAre("zone-v1-1", "zone-v1-2"));
  // A crashed process cannot deregister: the deployer clears what each stopped one left.
  EXPECT_THAT(forgotten_, ElementsAre("zone/zone-v2-1", "zone/zone-v2-2"));
  EXPECT_EQ(records_.back().second["verdict"], "fail");
  EXPECT_EQ(records_.back().second["reason"], out.reason);
  const std::string timeline = out.record["timeline"].dump();
  EXPECT_THAT(timeline, HasSubstr("rolled back"));
  EXPECT_THAT(timeline, HasSubstr("removed the registry entry zone-v2-2 left behind"));
}

TEST_F(DeployerTest, AFailedStartStopsWhatDidStart) {
  platform_.fail_start = "zone-v2-2";
  const DeployOutcome out = Run(Spec("v2"));
  EXPECT_EQ(out.verdict, Verdict::kFail);
  EXPECT_THAT(out.reason, HasSubstr("could not start zone-v2-2: no room for zone-v2-2"));
  EXPECT_THAT(platform_.ids(), ElementsAre("zone-v1-1", "zone-v1-2"));
  // The one that failed is stopped too: an error may hide a start that happened.
  EXPECT_THAT(platform_.calls(),
              ElementsAre("start zone-v1-1", "start zone-v1-2", "start zone-v2-1",
                          "start zone-v2-2", "stop zone-v2-1 1500", "stop zone-v2-2 1500"));
  EXPECT_TRUE(out.left_running.empty());
}

TEST_F(DeployerTest, TheSameVersionAgainIsRefusedBeforeAnythingStarts) {
  const DeployOutcome out = Run(Spec("v1"));
  EXPECT_EQ(out.verdict, Verdict::kFail);
  EXPECT_THAT(out.reason, HasSubstr("version v1 of zone is already deployed"));
  EXPECT_EQ(platform_.calls().size(), 2u);  // only the fixture's starts
}

TEST_F(DeployerTest, NoReadinessDataFailsAtTheProgressDeadline) {
  registry_up_ = false;
  DeploySpec spec = Spec("v2");
  spec.gate.progress_deadline = 200ms;
  const DeployOutcome out = Run(spec);
  EXPECT_EQ(out.verdict, Verdict::kFail);
  EXPECT_THAT(out.reason, HasSubstr("no data to judge the new version by"));
  EXPECT_THAT(platform_.ids(), ElementsAre("zone-v1-1", "zone-v1-2"));
}

TEST_F(DeployerTest, AnInterruptedDeployRollsBack) {
  DeploySpec spec = Spec("v2");
  spec.gate.min_healthy = 1h;  // it would wait: the interrupt ends it
  spec.gate.progress_deadline = 2h;
  std::stop_source interrupt;
  std::jthread ctrl_c([&] {
    while (platform_.ids().size() < 4) std::this_thread::sleep_for(1ms);
    interrupt.request_stop();
  });
  const DeployOutcome out = Run(spec, interrupt.get_token());
  EXPECT_EQ(out.verdict, Verdict::kFail);
  EXPECT_EQ(out.reason, "deploy interrupted");
  EXPECT_THAT(platform_.ids(), ElementsAre("zone-v1-1", "zone-v1-2"));
}

// Ports and the host address are the platform's to choose, on the host that runs the instance
// (host_ports_test): the controller sends the placeholders as they are.
TEST_F(DeployerTest, HostPlaceholdersAreLeftForThePlatform) {
  ASSERT_EQ(Run(Spec("v2")).verdict, Verdict::kPass);
  const std::vector<LaunchSpec> started = platform_.started();
  ASSERT_EQ(started.size(), 4u);
  for (const LaunchSpec& s : {started[2], started[3]}) {
    EXPECT_EQ(s.version, "v2");
    EXPECT_EQ(s.argv[2], "{id}");
    EXPECT_EQ(s.argv[4], "127.0.0.1:{port}");
    EXPECT_EQ(s.argv[6], "127.0.0.1:{health_port}");
    EXPECT_EQ(s.env.at("ZONE_PORT"), "{port}");
  }
}

TEST_F(DeployerTest, AStopThePlatformKeepsRefusingIsAnIncompleteRollbackNotACleanOne) {
  platform_.crash_looping = {"zone-v2-1"};
  platform_.refuse_stop = {"zone-v2-1"};
  const DeployOutcome out = Run(Spec("v2"));
  EXPECT_EQ(out.verdict, Verdict::kFail);
  EXPECT_THAT(out.left_running, ElementsAre("zone-v2-1"));
  const auto calls = platform_.calls();
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "stop zone-v2-1 1500"), 3);  // three tries
  EXPECT_THAT(platform_.ids(), ElementsAre("zone-v1-1", "zone-v1-2", "zone-v2-1"));
  const std::string timeline = out.record["timeline"].dump();
  EXPECT_THAT(timeline, HasSubstr("ROLLBACK INCOMPLETE: could not stop zone-v2-1"));
  EXPECT_THAT(timeline, ::testing::Not(HasSubstr("rolled back: the new instances are stopped")));
  EXPECT_EQ(records_.back().second["left_running"], nlohmann::json::array({"zone-v2-1"}));
}

TEST_F(DeployerTest, GateTimingsThatCannotJudgeAreRefused) {
  DeploySpec spec = Spec("v2");
  spec.gate.progress_deadline = 30ms;  // < min_healthy + 2 checks
  const DeployOutcome out = Run(spec);
  EXPECT_EQ(out.verdict, Verdict::kFail);
  EXPECT_THAT(out.reason, HasSubstr("progress deadline (0.0 s) must exceed"));
  EXPECT_EQ(platform_.calls().size(), 2u);  // nothing started
  spec.gate = GateOptions{1s, 2s, 60s};
  EXPECT_THAT(Run(spec).reason, HasSubstr("must be at least the check delay"));
}

TEST_F(DeployerTest, NoDataSaysWhyInTheReason) {
  registry_up_ = false;
  DeploySpec spec = Spec("v2");
  spec.gate.progress_deadline = 200ms;
  const DeployOutcome out = Run(spec);
  EXPECT_THAT(out.reason, HasSubstr("(last error: registry: registry down)"));
}

}  // namespace
}  // namespace drover::rollout
