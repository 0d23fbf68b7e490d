// The deploy controller over an in-memory platform and readiness: the order of starts and stops,
// the rollback on every failure path, the record written through the log, placeholders. The gate
// itself is tested in health_gate_test; the real processes in deploy_e2e_test.
#include "rollout/deployer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
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
    spec.max_surge = {100, true};  // one batch: both new next to both old (batches: below)
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
  // Reverted newest first.
  EXPECT_THAT(platform_.calls(),
              ElementsAre("start zone-v1-1", "start zone-v1-2", "start zone-v2-1",
                          "start zone-v2-2", "stop zone-v2-2 1500", "stop zone-v2-1 1500"));
  EXPECT_THAT(platform_.ids(), ElementsAre("zone-v1-1", "zone-v1-2"));
  // A crashed process cannot deregister: the deployer clears what each stopped one left.
  EXPECT_THAT(forgotten_, ElementsAre("zone/zone-v2-2", "zone/zone-v2-1"));
  EXPECT_EQ(records_.back().second["verdict"], "fail");
  EXPECT_EQ(records_.back().second["reason"], out.reason);
  const std::string timeline = out.record["timeline"].dump();
  EXPECT_THAT(timeline, HasSubstr("reverted"));
  EXPECT_THAT(timeline, HasSubstr("2 old instance(s) kept serving throughout"));
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
                          "start zone-v2-2", "stop zone-v2-2 1500", "stop zone-v2-1 1500"));
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
  EXPECT_THAT(timeline, HasSubstr("REVERT INCOMPLETE: could not stop zone-v2-1"));
  EXPECT_THAT(timeline, ::testing::Not(HasSubstr("reverted: the new instances are stopped")));
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

// One check for `drover deploy` (before anything runs) and for the deployer (a spec from a record
// or the library): each kind of spec that could never deploy is refused, with what is wrong.
TEST_F(DeployerTest, ASpecThatCouldNeverDeployIsRefusedSayingWhy) {
  EXPECT_TRUE(ValidateDeploySpec(Spec("v2")).ok());
  const auto refused = [](DeploySpec spec, const std::string& why) {
    const Status s = ValidateDeploySpec(spec);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << why;
    EXPECT_THAT(s.message(), HasSubstr(why));
  };
  DeploySpec spec = Spec("v2");
  spec.instances = 0;
  refused(spec, "instances must be at least 1");
  spec = Spec("v2");
  spec.max_surge = Amount{0, false};
  spec.max_unavailable = Amount{0, false};
  refused(spec, "no instance could ever be replaced");
  spec = Spec("v2");
  spec.argv.clear();
  refused(spec, "no command to run");
  spec = Spec("v2");
  spec.gate.progress_deadline = 30ms;
  refused(spec, "progress deadline");
  // The deployer asks too, before it touches anything.
  spec = Spec("v2");
  spec.max_surge = Amount{0, false};
  spec.max_unavailable = Amount{0, false};
  const DeployOutcome out = Run(spec);
  EXPECT_EQ(out.verdict, Verdict::kFail);
  EXPECT_THAT(out.reason, HasSubstr("no instance could ever be replaced"));
  EXPECT_EQ(platform_.calls().size(), 2u);  // nothing started
}

TEST_F(DeployerTest, NoDataSaysWhyInTheReason) {
  registry_up_ = false;
  DeploySpec spec = Spec("v2");
  spec.gate.progress_deadline = 200ms;
  const DeployOutcome out = Run(spec);
  EXPECT_THAT(out.reason, HasSubstr("(last error: registry: registry down)"));
}

// The registry keeps one running deploy per service: when the first record is refused for that,
// the deploy stops before it touches anything.
TEST_F(DeployerTest, ADeployThatCannotBeRecordedDoesNotStart) {
  Deployer deployer(
      platform_,
      [](const std::string&) -> Result<std::map<std::string, bool>> {
        return std::map<std::string, bool>{};
      },
      [](const std::string&, const nlohmann::json&) {
        return PermissionDeniedError(
            "registry: token 'zone-servers' may not deploy service 'zone'");
      },
      clock_);
  const DeployOutcome out = deployer.Run(Spec("v3"));
  EXPECT_EQ(out.verdict, Verdict::kFail);
  EXPECT_EQ(out.reason,
            "cannot record the deploy: registry: token 'zone-servers' may not deploy service "
            "'zone'");
  EXPECT_EQ(platform_.calls().size(), 2u);  // only the fixture's starts
}

TEST_F(DeployerTest, ASecondDeployOfARunningServiceStopsBeforeTouchingAnything) {
  Deployer deployer(
      platform_,
      [](const std::string&) -> Result<std::map<std::string, bool>> {
        return std::map<std::string, bool>{};
      },
      [](const std::string&, const nlohmann::json&) {
        return FailedPreconditionError("deploy zone-v2-17 of zone is running");
      },
      clock_);
  const DeployOutcome out = deployer.Run(Spec("v3"));
  EXPECT_EQ(out.verdict, Verdict::kFail);
  EXPECT_EQ(out.reason, "deploy zone-v2-17 of zone is running");
  EXPECT_EQ(platform_.calls().size(), 2u);  // only the fixture's starts
  EXPECT_THAT(platform_.ids(), ElementsAre("zone-v1-1", "zone-v1-2"));
}

// --- Across hosts: three platforms, two zone servers each --------------------------------------

class FleetDeployerTest : public ::testing::Test {
 protected:
  FleetDeployerTest() {
    for (int h = 0; h < 3; ++h) platforms_.push_back(std::make_unique<FakePlatform>(clock_));
  }

  void SetUp() override {
    // v1 as a deploy with this placement would leave it: n on host (n - 1) % 3.
    for (int n = 1; n <= 6; ++n) {
      const std::string id = "zone-v1-" + std::to_string(n);
      ASSERT_TRUE(
          platforms_[(n - 1) % 3]->Start(LaunchSpec{"zone", id, "v1", {"/bin/zone"}, {}}).ok());
    }
    for (auto& p : platforms_) {
      p->on_start = [this](const std::string&) { Sample(); };
      p->on_stop = [this](const std::string& id) { Sample(id); };
    }
  }

  DeploySpec Spec(const std::string& version) const {
    DeploySpec spec;
    spec.service = "zone";
    spec.version = version;
    spec.argv = {"/bin/zone", "--listen", "{host}:{port}"};
    spec.instances = 6;
    spec.max_surge = {1, false};
    spec.max_unavailable = {1, false};
    spec.gate = GateOptions{20ms, 10ms, 5s};
    spec.stop_grace = 1s;
    spec.drain_delay = 1ms;
    spec.poll = 2ms;
    return spec;
  }

  DeployOutcome Run(const DeploySpec& spec) {
    std::vector<DeployHost> hosts;
    for (std::size_t h = 0; h < platforms_.size(); ++h) {
      hosts.push_back(DeployHost{"host-" + std::to_string(h + 2), "", "", 0, platforms_[h].get()});
    }
    Deployer deployer(
        std::move(hosts),
        [this](const std::string& service) -> Result<std::map<std::string, bool>> {
          return Ready(service);
        },
        [](const std::string&, const nlohmann::json&) { return Status::Ok(); }, clock_, {},
        [this](const std::string&, const std::string& id) -> Result<bool> {
          std::lock_guard lock(mu_);
          draining_.insert(id);
          return true;
        });
    return deployer.Run(spec);
  }

  // READY: running, not crash-looping, not drained.
  std::map<std::string, bool> Ready(const std::string& service) {
    std::map<std::string, bool> ready;
    for (auto& p : platforms_) {
      const auto listed = p->List(service);
      if (!listed.ok()) continue;
      for (const InstanceInfo& i : *listed) {
        std::lock_guard lock(mu_);
        ready[i.spec.id] =
            p->crash_looping.count(i.spec.id) == 0 && draining_.count(i.spec.id) == 0;
      }
    }
    return ready;
  }

  // The bounds, at every start and stop: instances running, and READY ones (`stopping` is about
  // to go, and no longer counts).
  void Sample(const std::string& stopping = "") {
    int running = 0, ready = 0;
    for (auto& p : platforms_) {
      for (const std::string& id : p->ids()) {
        ++running;
        std::lock_guard lock(mu_);
        if (id != stopping && p->crash_looping.count(id) == 0 && draining_.count(id) == 0) ++ready;
      }
    }
    std::lock_guard lock(mu_);
    max_running_ = std::max(max_running_, running);
    min_ready_ = std::min(min_ready_, ready);
  }

  std::set<std::string> Ids(std::size_t host) const { return platforms_[host]->ids(); }

  RealClock clock_;
  std::vector<std::unique_ptr<FakePlatform>> platforms_;
  std::mutex mu_;
  std::set<std::string> draining_;
  int max_running_ = 0;
  int min_ready_ = 1 << 30;
};

TEST_F(FleetDeployerTest, RollsHostByHostWithinSurgeAndUnavailable) {
  const DeployOutcome out = Run(Spec("v2"));
  ASSERT_EQ(out.verdict, Verdict::kPass) << out.reason;
  EXPECT_THAT(Ids(0), ElementsAre("zone-v2-1", "zone-v2-4"));
  EXPECT_THAT(Ids(1), ElementsAre("zone-v2-2", "zone-v2-5"));
  EXPECT_THAT(Ids(2), ElementsAre("zone-v2-3", "zone-v2-6"));
  EXPECT_LE(max_running_, 7);  // 6 + surge 1
  EXPECT_GE(min_ready_, 5);    // 6 - unavailable 1
  // Drained before stopped: every old instance was DRAINING first.
  for (int n = 1; n <= 6; ++n) EXPECT_TRUE(draining_.count("zone-v1-" + std::to_string(n)));
  const auto& batches = out.record["batches"];
  ASSERT_EQ(batches.size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(batches[k]["verdict"], "pass");
    EXPECT_EQ(batches[k]["items"].size(), 2u);
    EXPECT_EQ(batches[k]["items"][0]["host"], "host-" + std::to_string(k + 2));
    EXPECT_TRUE(batches[k].contains("gated_after_s"));
    EXPECT_TRUE(batches[k].contains("finished_at_ms"));
  }
}

// The third batch's host runs a release that crashes there only: the deploy reverts, the old
// instances stopped in batches 1-2 (and 3's first) are READY again before any new one stops.
TEST_F(FleetDeployerTest, AFailingThirdBatchRevertsOldInstancesBackBeforeNewOnesStop) {
  platforms_[2]->crash_looping = {"zone-v2-3", "zone-v2-6"};
  bool old_back_first = true;
  for (auto& p : platforms_) {
    p->on_stop = [this, &old_back_first](const std::string& id) {
      Sample(id);
      if (id.find("-v2-") == std::string::npos) return;
      const std::map<std::string, bool> ready = Ready("zone");
      for (int n = 1; n <= 6; ++n) {
        auto r = ready.find("zone-v1-" + std::to_string(n));
        if (r == ready.end()) old_back_first = false;
      }
    };
  }
  // Restarted old instances are not drained any more.
  for (auto& p : platforms_) {
    p->on_start = [this](const std::string& id) {
      std::lock_guard lock(mu_);
      draining_.erase(id);
    };
  }
  const DeployOutcome out = Run(Spec("v2"));
  ASSERT_EQ(out.verdict, Verdict::kFail);
  EXPECT_THAT(out.reason, HasSubstr("batch 3/3"));
  EXPECT_THAT(out.reason, HasSubstr("crashed repeatedly"));
  EXPECT_TRUE(old_back_first);
  EXPECT_THAT(Ids(0), ElementsAre("zone-v1-1", "zone-v1-4"));
  EXPECT_THAT(Ids(1), ElementsAre("zone-v1-2", "zone-v1-5"));
  EXPECT_THAT(Ids(2), ElementsAre("zone-v1-3", "zone-v1-6"));
  EXPECT_EQ(out.record["batches"][0]["verdict"], "pass");
  EXPECT_EQ(out.record["batches"][1]["verdict"], "pass");
  EXPECT_EQ(out.record["batches"][2]["verdict"], "fail");
  EXPECT_THAT(out.record["timeline"].dump(),
              HasSubstr("the stopped old instances are READY again"));
}

// A controller that stops mid-batch (here: its record says another took over, so it touches
// nothing more) leaves a record from which another controller finishes the deploy: no instance
// started twice, none left behind.
TEST_F(FleetDeployerTest, AnotherControllerResumesFromTheRecordWithoutDuplicates) {
  nlohmann::json at_handover;
  std::vector<DeployHost> hosts;
  for (std::size_t h = 0; h < platforms_.size(); ++h) {
    hosts.push_back(DeployHost{"host-" + std::to_string(h + 2), "", "", 0, platforms_[h].get()});
  }
  const auto ready = [this](const std::string& service) -> Result<std::map<std::string, bool>> {
    return Ready(service);
  };
  const auto drain = [this](const std::string&, const std::string& id) -> Result<bool> {
    std::lock_guard lock(mu_);
    draining_.insert(id);
    return true;
  };
  {
    Deployer first(
        hosts, ready,
        [&](const std::string&, const nlohmann::json& record) {
          // Batch 2 has started its new instances: the first controller is gone from here on.
          if (!at_handover.is_null()) return AbortedError("deploy taken over by test");
          if (record.value("new_instances", nlohmann::json::array()).size() == 4) {
            at_handover = record;
            return AbortedError("deploy taken over by test");
          }
          return Status::Ok();
        },
        clock_, {}, drain);
    const DeployOutcome stopped = first.Run(Spec("v2"), {}, "first");
    EXPECT_NE(stopped.reason.find("taken over by test"), std::string::npos) << stopped.reason;
  }
  ASSERT_FALSE(at_handover.is_null());
  EXPECT_EQ(Ids(1).size(), 3u);  // host 3 mid-batch: one v1 stopped first, one left, two v2
  const std::size_t starts_before = platforms_[1]->started().size();

  Deployer second(
      hosts, ready, [](const std::string&, const nlohmann::json&) { return Status::Ok(); }, clock_,
      {}, drain);
  const DeployOutcome out = second.Resume(at_handover, {}, "second");
  ASSERT_EQ(out.verdict, Verdict::kPass) << out.reason;
  EXPECT_THAT(Ids(0), ElementsAre("zone-v2-1", "zone-v2-4"));
  EXPECT_THAT(Ids(1), ElementsAre("zone-v2-2", "zone-v2-5"));
  EXPECT_THAT(Ids(2), ElementsAre("zone-v2-3", "zone-v2-6"));
  // Host 3's new instances were asked to start again and were found running: no second copy.
  EXPECT_EQ(platforms_[1]->started().size() - starts_before, 2u);
  EXPECT_THAT(out.record["timeline"].dump(),
              HasSubstr("zone-v2-2 on host-3 runs already (started before the takeover)"));
  EXPECT_EQ(out.record["controller"]["owner"], "second");
}

TEST_F(FleetDeployerTest, ACrashingCanaryFailsBeforeAnyOtherHostIsTouched) {
  DeploySpec spec = Spec("v3");
  spec.canary = Amount{1, false};
  platforms_[0]->crash_looping = {"zone-v3-1"};
  const std::size_t calls_1 = platforms_[1]->calls().size();
  const std::size_t calls_2 = platforms_[2]->calls().size();
  const DeployOutcome out = Run(spec);
  ASSERT_EQ(out.verdict, Verdict::kFail);
  EXPECT_THAT(out.reason, HasSubstr("canary batch 1/"));
  EXPECT_EQ(platforms_[1]->calls().size(), calls_1);
  EXPECT_EQ(platforms_[2]->calls().size(), calls_2);
  EXPECT_THAT(Ids(0), ElementsAre("zone-v1-1", "zone-v1-4"));
}

TEST_F(FleetDeployerTest, AnUnreachableHostFailsTheDeployNamingIt) {
  DeploySpec spec = Spec("v2");
  spec.gate.min_healthy = 1s;  // the batch is still gating when the host goes
  spec.gate.check_delay = 100ms;
  spec.host_timeout = 50ms;
  platforms_[1]->on_start = [this](const std::string& id) {
    if (id == "zone-v2-5") platforms_[1]->unreachable = true;  // both of batch 2 started
  };
  const DeployOutcome out = Run(spec);
  ASSERT_EQ(out.verdict, Verdict::kFail);
  EXPECT_THAT(out.reason, HasSubstr("batch 2/3: host host-3 unreachable for"));
  // What could be undone was; what is on the unreachable host is reported, not hidden.
  EXPECT_THAT(Ids(0), ElementsAre("zone-v1-1", "zone-v1-4"));
  EXPECT_THAT(out.left_running, ElementsAre("zone-v2-5", "zone-v2-2"));
  EXPECT_THAT(out.record["timeline"].dump(),
              HasSubstr("could not start old instance zone-v1-2 on host-3 again"));
}

}  // namespace
}  // namespace drover::rollout
