// Fault injection: `drover agent` is SIGKILLed in the middle of a rolling deploy (`drover deploy`
// of the sample zone server from v1 to v2, both instances of v2 started and being gated) and
// started again on the same data directory and port.
// What the agent does (docs/ARCHITECTURE.md, "Rollouts"): its instances get SIGTERM from the
// kernel (PDEATHSIG) and leave in order; the successor waits for them, kills what remains of
// them, and starts the desired set recorded in instances.json (v1 and v2) -- nothing twice. The
// deploy controller meanwhile has no data from the agent and keeps waiting (within its progress
// deadline), then gates the restarted v2 instances afresh.
// Checked: the deploy ends with a verdict, recorded by the agent; the agent runs exactly the
// replicas of the version that verdict names; no zone server of this test runs outside the
// agent (orphans) or twice; the registry lists exactly those replicas, READY.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/child_process.h"
#include "testing/eventually.h"
#include "testing/http_client.h"
#include "testing/port_in.h"
#include "testing/processes.h"
#include "testing/registry_process.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::ChildProcess;
using drover::testing::Eventually;
using drover::testing::Http;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kReplicas = 2;

struct Finished {
  bool exited = false;  // false: still running at the deadline (then killed)
  int exit_code = -1;
  std::string out;
};

// Reads `child`'s stdout until it closes, then reaps it; kills it at `timeout`.
Finished Finish(ChildProcess& child, std::chrono::milliseconds timeout) {
  Finished f;
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto line = child.ReadLine(std::max(left, 1ms));
    if (!line) break;
    f.out += *line + "\n";
  }
  f.exited = Clock::now() < deadline;
  if (!f.exited) child.Signal(SIGKILL);
  const int status = child.Wait();
  f.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return f;
}

// The agent's instances of "zone": id -> {version, pid, status}.
struct AgentInstance {
  std::string version;
  int pid = 0;
  std::string status;
};
std::map<std::string, AgentInstance> AgentInstances(std::uint16_t agent) {
  std::map<std::string, AgentInstance> out;
  const auto reply = Http(agent, "GET", "/v1/instances?service=zone");
  const json body = json::parse(reply.body, nullptr, false);
  if (reply.status != 200 || !body.is_object() || !body.contains("instances")) return out;
  for (const json& i : body["instances"]) {
    out[i["id"].get<std::string>()] = {i.value("version", ""), i.value("pid", 0),
                                       i.value("status", "")};
  }
  return out;
}

// The registry's instances of "zone": id -> state.
std::map<std::string, std::string> RegistryInstances(std::uint16_t registry,
                                                     int* listed = nullptr) {
  std::map<std::string, std::string> out;
  const auto reply = Http(registry, "GET", "/v1/services/zone/instances");
  const json body = json::parse(reply.body, nullptr, false);
  if (listed != nullptr) *listed = 0;
  if (reply.status != 200 || !body.is_object() || !body.contains("instances")) return out;
  for (const json& in : body["instances"]) {
    out[in["id"].get<std::string>()] = in.value("state", "");
    if (listed != nullptr) ++*listed;
  }
  return out;
}

class AgentKillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = drover::testing::StartRegistryProcess(
        DROVER_BINARY, {"--data-dir", dir_.path() + "/registry", "--http", "127.0.0.1:0", "--grpc",
                        "127.0.0.1:0"});
    ASSERT_NE(registry_.grpc, 0) << registry_.line;
    ASSERT_TRUE(StartAgent());
  }
  void TearDown() override {
    if (HasFailure()) {  // what the instances said: why one would not start, for instance
      std::error_code ec;
      for (const auto& log : std::filesystem::directory_iterator(dir_.path() + "/agent/logs", ec)) {
        std::ifstream in(log.path());
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (text.size() > 2000) text = "..." + text.substr(text.size() - 2000);
        std::printf("--- %s\n%s", log.path().filename().c_str(), text.c_str());
      }
    }
    // SIGTERM: the agent stops its instances in order (they deregister themselves).
    if (agent_ && agent_->running()) {
      agent_->Signal(SIGTERM);
      agent_->Wait();
    }
  }

  // The first time on any free port; then on that same port (and always the same data
  // directory): the deploy controller knows one address.
  bool StartAgent() {
    agent_ = std::make_unique<ChildProcess>(std::vector<std::string>{
        DROVER_BINARY, "agent", "--data-dir", dir_.path() + "/agent", "--listen",
        "127.0.0.1:" + std::to_string(agent_port_), "--max-restarts", "20"});
    const auto line = agent_->ReadLine(30s);
    const std::uint16_t port =
        line ? drover::testing::PortIn(*line, R"(http://127\.0\.0\.1:(\d+))") : 0;
    if (port == 0 || (agent_port_ != 0 && port != agent_port_)) return false;
    agent_port_ = port;
    return true;
  }

  std::vector<std::string> DeployArgv(const std::string& version) const {
    return {DROVER_BINARY, "deploy", "zone", "--version", version, "--instances",
            std::to_string(kReplicas), "--agent", "http://127.0.0.1:" + std::to_string(agent_port_),
            "--registry", "http://127.0.0.1:" + std::to_string(registry_.http), "--min-healthy-ms",
            "1500", "--check-delay-ms", "1000", "--progress-deadline-ms", "30000",
            "--stop-grace-ms", "5000", "--",
            // The zone server, as the agent will run it ({...} filled per instance).
            DROVER_BINARY, "sample", "zone", "--registry", registry_.grpc_address(), "--id", "{id}",
            "--listen", "127.0.0.1:{port}", "--health", "127.0.0.1:{health_port}",
            "--version-label", "{version}", "--warmup-ms", "300", "--ttl-ms", "2000",
            "--propagation-ms", "200", "--drain-ms", "500", "--grace-ms", "3000", "--log-level",
            "warn"};
  }

  drover::testing::TempDir dir_;
  drover::testing::RegistryProcess registry_;
  std::uint16_t agent_port_ = 0;
  std::unique_ptr<ChildProcess> agent_;
};

TEST_F(AgentKillTest, AnAgentKilledMidDeployLeavesADefinedEndStateWithoutOrphansOrDuplicates) {
  {
    ChildProcess v1(DeployArgv("v1"));
    const Finished done = Finish(v1, 40s);
    ASSERT_EQ(done.exit_code, 0) << done.out;
    ASSERT_NE(done.out.find("PASSED"), std::string::npos) << done.out;
  }
  ASSERT_EQ(AgentInstances(agent_port_).size(), static_cast<std::size_t>(kReplicas));

  // v2: killed under it once both of its instances are READY and the gate is counting.
  ChildProcess v2(DeployArgv("v2"));
  ASSERT_TRUE(Eventually(
      [&] {
        const auto listed = RegistryInstances(registry_.http);
        int ready = 0;
        for (const auto& [id, state] : listed)
          ready += id.rfind("zone-v2-", 0) == 0 && state == "READY";
        return ready == kReplicas;
      },
      30s, 20ms))
      << "v2 never became READY";
  const auto killed_pid = agent_->pid();
  const Clock::time_point killed_at = Clock::now();
  agent_->Signal(SIGKILL);
  agent_->Wait();
  // Down long enough for the controller to find it gone (it polls every 0.5 s).
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(StartAgent()) << "the agent did not start again on its data directory";
  const auto down_for = Clock::now() - killed_at;

  const Finished deploy = Finish(v2, 60s);
  std::printf("--- drover deploy zone --version v2 (exit %d)\n%s", deploy.exit_code,
              deploy.out.c_str());
  ASSERT_TRUE(deploy.exited) << "the deploy did not end within 60 s";
  const bool passed = deploy.exit_code == 0;

  // The verdict, as the agent recorded it.
  std::string recorded;
  {
    const auto reply = Http(agent_port_, "GET", "/v1/deploys?service=zone");
    const json body = json::parse(reply.body, nullptr, false);
    ASSERT_TRUE(body.is_object() && body.contains("deploys")) << reply.body;
    for (const json& d : body["deploys"]) {
      if (d.value("version", "") != "v2") continue;
      recorded = d.value("verdict", "");
      EXPECT_TRUE(d.contains("finished_at_ms")) << "the record never got its end: " << d.dump();
      break;
    }
  }

  // The replicas the verdict names, and only those, on the agent and in the registry.
  const std::string intended_version = passed ? "v2" : "v1";
  std::set<std::string> intended;
  for (int n = 1; n <= kReplicas; ++n) {
    intended.insert("zone-" + intended_version + "-" + std::to_string(n));
  }
  std::map<std::string, AgentInstance> on_agent;
  std::set<std::string> agent_ids;
  EXPECT_TRUE(Eventually(
      [&] {
        on_agent = AgentInstances(agent_port_);
        agent_ids.clear();
        bool running = true;
        for (const auto& [id, i] : on_agent) {
          agent_ids.insert(id);
          running = running && i.status == "RUNNING" && i.pid > 0;
        }
        return agent_ids == intended && running;
      },
      10s, 50ms));
  std::map<std::string, std::string> in_registry;
  int registry_entries = 0;
  const bool registry_settled = Eventually(
      [&] {
        in_registry = RegistryInstances(registry_.http, &registry_entries);
        bool ready = true;
        std::set<std::string> ids;
        for (const auto& [id, state] : in_registry) {
          ids.insert(id);
          ready = ready && state == "READY";
        }
        return ids == intended && ready && registry_entries == kReplicas;
      },
      15s, 50ms);

  // Zone servers of this test (their command line names its registry) that the agent does not
  // supervise, and instances running twice.
  const std::string zone_prefix =
      std::string(DROVER_BINARY) + " sample zone --registry " + registry_.grpc_address() + " ";
  std::set<int> supervised;
  for (const auto& [id, i] : on_agent) supervised.insert(i.pid);
  std::vector<std::string> orphans, duplicates;
  int zone_processes = 0;
  Eventually(
      [&] {
        orphans.clear();
        duplicates.clear();
        zone_processes = 0;
        std::map<std::string, int> copies;
        for (const auto& p : drover::testing::ProcessesWith(registry_.grpc_address())) {
          if (p.cmdline.rfind(zone_prefix, 0) != 0) continue;
          ++zone_processes;
          ++copies[p.instance_id];
          if (p.ppid != agent_->pid() || supervised.count(p.pid) == 0) {
            orphans.push_back(p.instance_id + " pid " + std::to_string(p.pid) + " parent " +
                              std::to_string(p.ppid));
          }
        }
        for (const auto& [id, n] : copies) {
          if (n > 1) duplicates.push_back(id + " x" + std::to_string(n));
        }
        return orphans.empty() && duplicates.empty();
      },
      5s, 50ms);

  std::string agent_list, registry_list;
  for (const auto& [id, i] : on_agent) agent_list += " " + id + "(" + i.status + ")";
  for (const auto& [id, state] : in_registry) registry_list += " " + id + "(" + state + ")";
  std::printf(
      "agent kill: agent pid %d SIGKILLed mid-deploy, back %lld ms later (pid %d); deploy v2 "
      "exit %d, verdict recorded '%s'; intended %d x %s; agent runs:%s; registry lists %d:%s; "
      "zone processes %d, orphans %zu, duplicates %zu\n",
      static_cast<int>(killed_pid),
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(down_for).count()),
      static_cast<int>(agent_->pid()), deploy.exit_code, recorded.c_str(), kReplicas,
      intended_version.c_str(), agent_list.c_str(), registry_entries, registry_list.c_str(),
      zone_processes, orphans.size(), duplicates.size());
  for (const auto& o : orphans) std::printf("  orphan: %s\n", o.c_str());
  for (const auto& d : duplicates) std::printf("  duplicate: %s\n", d.c_str());

  EXPECT_TRUE(deploy.exit_code == 0 || deploy.exit_code == 1)
      << "neither passed nor cleanly rolled back (3: something it had to stop still runs)";
  EXPECT_EQ(recorded, passed ? "pass" : "fail") << "the agent's record disagrees with the deploy";
  EXPECT_EQ(agent_ids, intended);
  EXPECT_TRUE(registry_settled) << "the registry does not list exactly the intended replicas";
  EXPECT_EQ(registry_entries, kReplicas);
  EXPECT_EQ(zone_processes, kReplicas);
  EXPECT_TRUE(orphans.empty());
  EXPECT_TRUE(duplicates.empty());
}

}  // namespace
