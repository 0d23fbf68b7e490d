// Seed 004 replayed with real processes: a registry, `drover agent`, `drover gateway` and zone
// servers deployed by `drover deploy`, while a player connects through the gateway every 20 ms.
//
//   1. v1 (2 instances) deploys onto an empty service and passes.
//   2. v2 aborts 2.5 s after every boot (`--crash-after 2.5`): the gate must fail it with the
//      crash-loop reason, the agent must have stopped its instances, v1 must still run.
//   3. v3 is healthy: it passes and replaces v1.
// The player must always get in: it may lose a session in flight only to a v2 process aborting
// (and then gets in at once on retry), never anywhere else. The test prints how long after the
// crashing deploy began it was rejected and how long the rollback took.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/http_client.h"
#include "testing/line_client.h"
#include "testing/port_in.h"
#include "testing/processes.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::ChildProcess;
using drover::testing::PortIn;
using json = nlohmann::json;

double SecondsIn(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return -1;
  return std::stod(m[1].str());
}

// Live processes whose environment says they are an instance whose id starts with `prefix`
// (the agent sets DROVER_INSTANCE_ID for every instance) and whose command line has `marker`
// (this test's registry address: other tests' instances are not ours).
std::vector<std::string> ProcessesOf(const std::string& prefix, const std::string& marker) {
  std::vector<std::string> found;
  for (const auto& p : drover::testing::ProcessesWith(marker)) {
    if (!p.instance_id.starts_with(prefix)) continue;
    found.push_back(p.instance_id + " pid " + std::to_string(p.pid) + " state " + p.state + ": " +
                    p.cmdline);
  }
  return found;
}

// Now as HH:MM:SS.mmm UTC, to line a player's failure up with the processes' logs.
std::string WallClock() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>((now.time_since_epoch() / std::chrono::milliseconds(1)) % 1000));
  return buf;
}

// A player: connects through the gateway, says HELLO, expects WELCOME <instance>, leaves; every
// 20 ms. A session the server drops is retried at once, as game clients do -- a process that
// aborts takes the sessions in flight with it, which no deploy system can prevent; what it must
// prevent is a player who cannot get in. So: a drop is recorded with the phase it happened in,
// and a player refused twice in a row is a failure.
class Player {
 public:
  explicit Player(std::uint16_t port)
      : thread_([this, port](std::stop_token stop) {
          while (!stop.stop_requested()) {
            std::string why;
            if (!Visit(port, why)) {
              std::string phase;
              {
                std::lock_guard lock(mu_);
                phase = phase_;
                drops_.push_back(phase + ": " + why);
              }
              // Not under mu_: a successful Visit takes it.
              std::string again;
              if (!Visit(port, again)) {
                std::lock_guard lock(mu_);
                refused_.push_back(phase + ": " + why + "; then " + again);
              }
            }
            std::this_thread::sleep_for(20ms);
          }
        }) {}

  void SetPhase(std::string phase) {
    std::lock_guard lock(mu_);
    phase_ = std::move(phase);
  }
  std::map<std::string, int> served_by() const {
    std::lock_guard lock(mu_);
    return served_by_;
  }
  std::vector<std::string> drops() const {
    std::lock_guard lock(mu_);
    return drops_;
  }
  std::vector<std::string> refused() const {
    std::lock_guard lock(mu_);
    return refused_;
  }
  std::string last() const {
    std::lock_guard lock(mu_);
    return last_;
  }
  void Stop() {
    thread_.request_stop();
    thread_.join();
  }

 private:
  bool Visit(std::uint16_t port, std::string& why) {
    const auto began = std::chrono::steady_clock::now();
    drover::testing::LineClient c(port);
    const auto reply = c.Ask("HELLO player");
    if (reply && reply->rfind("WELCOME ", 0) == 0) {
      std::lock_guard lock(mu_);
      ++served_by_[reply->substr(8)];
      last_ = reply->substr(8);
      return true;
    }
    why = WallClock() + " " +
          (c.connected() ? "no WELCOME (got " + reply.value_or("EOF") + ")" : "connect failed") +
          " after " + std::to_string((std::chrono::steady_clock::now() - began) / 1ms) + " ms";
    return false;
  }

  mutable std::mutex mu_;
  std::string phase_ = "v1";
  std::map<std::string, int> served_by_;
  std::vector<std::string> drops_;
  std::vector<std::string> refused_;
  std::string last_;
  std::jthread thread_;
};

class DeployE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{DROVER_BINARY, "registry", "--data-dir", dir_.path() + "/r",
                                 "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"});
    const auto reg = registry_->ReadLine(20s);
    ASSERT_TRUE(reg.has_value());
    grpc_ = "127.0.0.1:" + std::to_string(PortIn(*reg, R"(grpc://127\.0\.0\.1:(\d+))"));
    registry_http_ = PortIn(*reg, R"(http://127\.0\.0\.1:(\d+))");
    ASSERT_NE(registry_http_, 0) << *reg;

    agent_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{DROVER_BINARY, "agent", "--data-dir", dir_.path() + "/agent",
                                 "--listen", "127.0.0.1:0", "--max-restarts", "20"});
    const auto agent_line = agent_->ReadLine(20s);
    ASSERT_TRUE(agent_line.has_value());
    agent_port_ = PortIn(*agent_line, R"(http://127\.0\.0\.1:(\d+))");
    ASSERT_NE(agent_port_, 0) << *agent_line;

    const std::string config = dir_.path() + "/gateway.yaml";
    std::ofstream(config) << "registry: " << grpc_ << "\nthreads: 1\nadmin: \"\"\n"
                          << "listeners:\n  - name: zone\n    address: 127.0.0.1:0\n"
                          << "    service: zone\n    slow_start_ms: 2000\n";
    gateway_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{DROVER_BINARY, "gateway", "--config", config});
    const auto gw_line = gateway_->ReadLine(20s);
    ASSERT_TRUE(gw_line.has_value());
    gateway_port_ = PortIn(*gw_line, R"(zone=127\.0\.0\.1:(\d+))");
    ASSERT_NE(gateway_port_, 0) << *gw_line;
  }

  void TearDown() override {
    // The agent stops its instances in order on SIGTERM; then the rest.
    if (agent_) {
      agent_->Signal(SIGTERM);
      agent_->Wait();
    }
  }

  // `drover deploy zone --version V` of the zone server with `extra` arguments.
  drover::testing::CommandResult Deploy(const std::string& version, const std::string& extra) {
    const std::string cmd =
        std::string(DROVER_BINARY) + " deploy zone --version " + version + " --instances 2" +
        " --agent http://127.0.0.1:" + std::to_string(agent_port_) +
        " --registry http://127.0.0.1:" + std::to_string(registry_http_) +
        " --min-healthy-ms 3000 --check-delay-ms 2000 --progress-deadline-ms 60000" +
        " --stop-grace-ms 10000 -- " + ZONE_SERVER_BINARY + " --registry " + grpc_ +
        " --id {id} --listen 127.0.0.1:{port} --health 127.0.0.1:{health_port}" +
        " --version-label {version} --warmup-ms 500 --ttl-ms 2000 --propagation-ms 1000" +
        " --drain-ms 3000 --grace-ms 8000 --log-level warn " + extra;
    auto run = drover::testing::RunCommand(cmd);
    std::cout << "--- drover deploy zone --version " << version << " " << extra << " (exit "
              << run.exit_code << ")\n"
              << run.out;
    return run;
  }

  // The agent's instances of "zone": id -> {version, pid}.
  std::map<std::string, std::pair<std::string, int>> AgentInstances() const {
    std::map<std::string, std::pair<std::string, int>> out;
    const auto reply = drover::testing::Http(agent_port_, "GET", "/v1/instances?service=zone");
    EXPECT_EQ(reply.status, 200) << reply.body;
    const json body = json::parse(reply.body, nullptr, false);
    if (body.is_discarded()) return out;
    for (const json& i : body["instances"]) {
      out[i["id"]] = {i["version"], i.value("pid", 0)};
    }
    return out;
  }

  drover::testing::TempDir dir_;
  std::unique_ptr<ChildProcess> registry_, agent_, gateway_;
  std::string grpc_;
  std::uint16_t registry_http_ = 0, agent_port_ = 0, gateway_port_ = 0;
};

TEST_F(DeployE2eTest, ACrashLoopingReleaseIsRejectedAndAHealthyOneReplacesTheOld) {
  // 1. v1 onto the empty service.
  const auto v1 = Deploy("v1", "");
  ASSERT_EQ(v1.exit_code, 0) << v1.out;
  ASSERT_NE(v1.out.find("PASSED"), std::string::npos) << v1.out;
  const auto v1_instances = AgentInstances();
  ASSERT_EQ(v1_instances.size(), 2u);

  Player player(gateway_port_);
  ASSERT_TRUE(drover::testing::Eventually([&] { return player.served_by().size() == 2; }, 20s))
      << "the gateway never routed to both v1 instances";

  // 2. The crash loop: rejected, rolled back, v1 untouched.
  player.SetPhase("v2");
  const auto v2 = Deploy("v2", "--crash-after 2.5");
  player.SetPhase("after v2");
  EXPECT_EQ(v2.exit_code, 1) << v2.out;
  EXPECT_NE(v2.out.find("FAILED"), std::string::npos) << v2.out;
  EXPECT_NE(v2.out.find("crashed repeatedly since deploy began"), std::string::npos) << v2.out;
  const double rejected_after = SecondsIn(v2.out, R"(FAILED after ([0-9.]+) s)");
  const double rollback = SecondsIn(v2.out, R"(reverted in ([0-9.]+) s)");
  EXPECT_GT(rejected_after, 0) << v2.out;
  EXPECT_GE(rollback, 0) << v2.out;
  EXPECT_EQ(AgentInstances(), v1_instances) << "v1 must keep running, v2 must be gone";
  EXPECT_THAT(ProcessesOf("zone-v2-", grpc_), ::testing::IsEmpty())
      << "a crashing instance outlived the rollback";
  // Nothing left in discovery either: entries of crashed processes were deregistered.
  const auto listed = drover::testing::Http(registry_http_, "GET", "/v1/services/zone/instances");
  EXPECT_EQ(listed.status, 200);
  EXPECT_EQ(listed.body.find("zone-v2-"), std::string::npos) << listed.body;

  // 3. A healthy release replaces v1.
  player.SetPhase("v3");
  const auto v3 = Deploy("v3", "");
  ASSERT_EQ(v3.exit_code, 0) << v3.out;
  EXPECT_NE(v3.out.find("PASSED"), std::string::npos) << v3.out;
  const auto v3_instances = AgentInstances();
  EXPECT_EQ(v3_instances.size(), 2u);
  for (const auto& [id, what] : v3_instances) EXPECT_EQ(what.first, "v3") << id;
  EXPECT_THAT(ProcessesOf("zone-v1-", grpc_), ::testing::IsEmpty()) << "v1 outlived its deploy";
  EXPECT_TRUE(
      drover::testing::Eventually([&] { return player.last().rfind("zone-v3-", 0) == 0; }, 10s))
      << "players never reached v3; last served by " << player.last();
  player.Stop();

  // The deploy history, as the operator sees it.
  const auto history = drover::testing::RunCommand(
      std::string(DROVER_BINARY) +
      " ctl deploys zone --agent http://127.0.0.1:" + std::to_string(agent_port_));
  EXPECT_EQ(history.exit_code, 0) << history.out;
  EXPECT_NE(history.out.find("crashed repeatedly"), std::string::npos) << history.out;

  std::cout << "crash-looping v2: rejected " << rejected_after
            << " s after the deploy began; rollback took " << rollback << " s\n";
  std::cout << "players served:";
  int total = 0;
  for (const auto& [id, n] : player.served_by()) {
    std::cout << " " << id << "=" << n;
    total += n;
  }
  std::cout << " (" << total << " sessions; " << player.drops().size()
            << " dropped by an aborting v2 process and served at once on retry)\n";
  for (const std::string& d : player.drops()) {
    std::cout << "  dropped: " << d << "\n";
    EXPECT_EQ(d.rfind("v2: ", 0), 0u) << "a session dropped outside the crashing release: " << d;
  }
  EXPECT_THAT(player.refused(), ::testing::IsEmpty()) << "a player could not get in";
}

// A deploy that cannot work says why within seconds and changes nothing, with an exit code that
// says so: a program the host cannot run (4: refused, nothing started), a registry or an agent
// that cannot be reached (3), a command not after "--" (2).
TEST_F(DeployE2eTest, ADeployThatCannotWorkFailsFastNamingTheCauseAndStartsNothing) {
  const std::string agent = " --agent http://127.0.0.1:" + std::to_string(agent_port_);
  const std::string registry = " --registry http://127.0.0.1:" + std::to_string(registry_http_);
  struct Case {
    std::string name, args;
    int exit_code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"binary missing", agent + registry + " -- /no/such/binary --flag", 4,
       "cannot run /no/such/binary: No such file or directory"},
      {"registry unreachable", agent + " --registry http://127.0.0.1:1 -- /bin/sleep 60", 3,
       "registry at 127.0.0.1:1: Connection refused"},
      {"agent unreachable", " --agent http://127.0.0.1:1" + registry + " -- /bin/sleep 60", 3,
       "agent at 127.0.0.1:1: Connection refused"},
      {"no --", agent + registry + " /bin/sleep 60", 2, "put the program after --"},
  };
  for (const Case& c : cases) {
    const auto began = std::chrono::steady_clock::now();
    const auto run = drover::testing::RunCommand(
        std::string(DROVER_BINARY) + " --log-level error deploy zone --version vx" + c.args);
    const auto took = std::chrono::steady_clock::now() - began;
    std::cout << "--- " << c.name << ": exit " << run.exit_code << " after "
              << std::chrono::duration<double>(took).count() << " s\n"
              << run.out;
    EXPECT_EQ(run.exit_code, c.exit_code) << c.name << "\n" << run.out;
    EXPECT_NE(run.out.find(c.says), std::string::npos) << c.name << "\n" << run.out;
    EXPECT_LT(took, 5s) << c.name;
    if (c.exit_code != 2) {
      EXPECT_NE(run.out.find("nothing was started or stopped"), std::string::npos) << run.out;
    }
    EXPECT_TRUE(AgentInstances().empty()) << c.name;
    EXPECT_THAT(ProcessesOf("zone-vx-", "/bin/sleep"), ::testing::IsEmpty()) << c.name;
  }
}

}  // namespace
