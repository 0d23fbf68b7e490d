// The fleet across machines, on one machine: each "host" is a `drover agent` on its own loopback
// address (127.0.0.2, 127.0.0.3, 127.0.0.4), registered in a real registry as service
// drover-agent; instances bind and advertise their host's address ("{host}"), never 127.0.0.1.
// The deploys run `drover deploy --agents all` while players open sessions through a real
// gateway: a rolling deploy, a crash-looping canary, and a release that fails on one host only
// and is reverted.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "testing/child_process.h"
#include "testing/etcd_cluster.h"
#include "testing/eventually.h"
#include "testing/http_client.h"
#include "testing/line_client.h"
#include "testing/port_in.h"
#include "testing/registry_process.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::ChildProcess;
using drover::testing::Eventually;
using json = nlohmann::json;

const std::vector<std::string> kHosts = {"127.0.0.2", "127.0.0.3", "127.0.0.4"};

struct Agent {
  std::string host;
  std::uint16_t port = 0;
  std::unique_ptr<ChildProcess> process;
};

// Players: threads that each open a session through the gateway (HELLO -> WELCOME <instance>)
// every 5 ms. A session without its WELCOME is a failure; none is retried.
class Players {
 public:
  Players(std::uint16_t gateway, int threads) {
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, gateway, t](std::stop_token stop) {
        while (!stop.stop_requested()) {
          drover::testing::LineClient client(gateway);
          const auto reply = client.Ask("HELLO player-" + std::to_string(t));
          if (reply && reply->rfind("WELCOME ", 0) == 0) {
            ++ok_;
          } else {
            std::lock_guard lock(mu_);
            failures_.push_back(reply.value_or("(no reply)"));
          }
          std::this_thread::sleep_for(5ms);
        }
      });
    }
  }
  void Stop() { threads_.clear(); }
  std::uint64_t ok() const { return ok_; }
  std::vector<std::string> failures() const {
    std::lock_guard lock(mu_);
    return failures_;
  }

 private:
  std::atomic<std::uint64_t> ok_{0};
  mutable std::mutex mu_;
  std::vector<std::string> failures_;
  std::vector<std::jthread> threads_;  // last: joined first
};

class FleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StartRegistries();
    for (std::size_t i = 0; i < kHosts.size(); ++i) StartAgent(i);
  }

  // The registry the fleet uses (SQLite); the etcd variant runs two over one etcd.
  virtual void StartRegistries() {
    registry_ = drover::testing::StartRegistryProcess(
        DROVER_BINARY, {"--data-dir", dir_.path() + "/registry", "--http", "127.0.0.1:0", "--grpc",
                        "127.0.0.1:0", "--tick-ms", "100"});
    ASSERT_NE(registry_.http, 0) << registry_.line;
  }

  void StartAgent(std::size_t i) {
    Agent& a = agents_[i];
    a.host = kHosts[i];
    a.process = std::make_unique<ChildProcess>(std::vector<std::string>{
        DROVER_BINARY, "--log-level", "warn", "agent", "--data-dir",
        dir_.path() + "/agent-" + a.host, "--listen", a.host + ":0", "--registry",
        registry_.grpc_address(), "--zone", "zone-" + std::to_string(i), "--capacity", "8"});
    const auto line = a.process->ReadLine(20s);
    ASSERT_TRUE(line.has_value());
    a.port = drover::testing::PortIn(*line, "http://" + std::string(a.host) + R"(:(\d+))");
    ASSERT_NE(a.port, 0) << *line;
  }

  // The registry's instances of `service`, by id.
  std::map<std::string, json> Instances(const std::string& service) {
    const auto reply =
        drover::testing::Http(registry_.http, "GET", "/v1/services/" + service + "/instances");
    std::map<std::string, json> out;
    const json body = json::parse(reply.body, nullptr, false);
    if (reply.status != 200 || body.is_discarded()) return out;
    for (const json& i : body["instances"]) out[i["id"].get<std::string>()] = i;
    return out;
  }

  // READY and accepting instances of `service` in the registry, or -1 without an answer.
  int ReadyCount(const std::string& service) {
    const auto reply =
        drover::testing::Http(registry_.http, "GET", "/v1/services/" + service + "/instances");
    const json body = json::parse(reply.body, nullptr, false);
    if (reply.status != 200 || body.is_discarded()) return -1;
    int ready = 0;
    for (const json& i : body["instances"]) {
      if (i["state"] == "READY" && i.value("accepting", false)) ++ready;
    }
    return ready;
  }

  // The versions of `service` an agent runs, by instance id.
  std::map<std::string, std::string> AgentVersions(const Agent& a, const std::string& service) {
    const auto reply =
        drover::testing::HttpTo(a.host, a.port, "GET", "/v1/instances?service=" + service);
    std::map<std::string, std::string> out;
    const json body = json::parse(reply.body, nullptr, false);
    if (reply.status != 200 || body.is_discarded()) return out;
    for (const json& i : body["instances"]) out[i["id"]] = i["version"];
    return out;
  }

  void StartGateway() {
    const std::string config = dir_.path() + "/gateway.yaml";
    std::ofstream(config) << "registry: " << registry_.grpc_address()
                          << "\nthreads: 1\nadmin: \"\"\n"
                          << "listeners:\n  - name: zone\n    address: 127.0.0.1:0\n"
                          << "    service: zone\n";
    gateway_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{DROVER_BINARY, "gateway", "--config", config});
    const auto line = gateway_->ReadLine(20s);
    ASSERT_TRUE(line.has_value());
    gateway_port_ = drover::testing::PortIn(*line, R"(zone=127\.0\.0\.1:(\d+))");
    ASSERT_NE(gateway_port_, 0) << *line;
  }

  // The zone server, binding and advertising its host's address.
  std::vector<std::string> ZoneCommand() const {
    return {DROVER_BINARY,
            "sample",
            "zone",
            "--registry",
            registry_.grpc_address(),
            "--id",
            "{id}",
            "--listen",
            "{host}:{port}",
            "--health",
            "{host}:{health_port}",
            "--version-label",
            "{version}",
            "--warmup-ms",
            "200",
            "--ttl-ms",
            "3000",
            "--propagation-ms",
            "300",
            "--drain-ms",
            "500",
            "--grace-ms",
            "3000",
            "--log-level",
            "warn"};
  }

  struct DeployRun {
    int exit_code = -1;
    json record;
    std::string out;
    double seconds = 0;
    int min_ready = 1 << 30;  // sampled every 50 ms while it ran
  };

  // `drover deploy zone` over every registered agent: 6 instances, surge 1, unavailable 1, the
  // gate's timing shortened; `command` after --.
  DeployRun Deploy(const std::string& version, const std::vector<std::string>& command,
                   const std::string& extra = "") {
    std::string cmd = std::string(DROVER_BINARY) + " --log-level warn deploy zone --version " +
                      version + " --instances 6 --agents all --registry http://127.0.0.1:" +
                      std::to_string(registry_.http) +
                      " --max-surge 1 --max-unavailable 1 --min-healthy-ms 1000"
                      " --check-delay-ms 500 --progress-deadline-ms 30000 --stop-grace-ms 5000"
                      " --drain-delay-ms 500 --json " +
                      extra + " --";
    for (const std::string& arg : command) cmd += " '" + arg + "'";
    DeployRun run;
    std::atomic<bool> done{false};
    std::jthread sampler([&] {
      while (!done) {
        if (const int n = ReadyCount("zone"); n >= 0) run.min_ready = std::min(run.min_ready, n);
        std::this_thread::sleep_for(50ms);
      }
    });
    const auto began = std::chrono::steady_clock::now();
    auto result = drover::testing::RunCommand(cmd, /*with_stderr=*/false);
    done = true;
    run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    run.exit_code = result.exit_code;
    run.out = result.out;
    run.record = json::parse(result.out, nullptr, false);
    std::cout << "--- deploy zone " << version << ": exit " << run.exit_code << " in "
              << run.seconds << " s, min READY " << run.min_ready;
    if (run.record.is_object()) {
      std::cout << ", decided after " << run.record.value("decided_after_s", 0.0)
                << " s, revert took " << run.record.value("rollback_s", 0.0)
                << " s: " << run.record.value("reason", "");
    }
    std::cout << "\n";
    return run;
  }

  // Starts `drover deploy zone --version v2` through the registry at `registry_port` as a
  // process, SIGKILLs it in batch 2 (127.0.0.3's new instances run, its gate has not passed) and
  // returns the deploy's id.
  std::string KillControllerInBatch2(std::uint16_t registry_port) {
    std::vector<std::string> argv = {DROVER_BINARY,
                                     "--log-level",
                                     "warn",
                                     "deploy",
                                     "zone",
                                     "--version",
                                     "v2",
                                     "--instances",
                                     "6",
                                     "--agents",
                                     "all",
                                     "--registry",
                                     "http://127.0.0.1:" + std::to_string(registry_port),
                                     "--max-surge",
                                     "1",
                                     "--max-unavailable",
                                     "1",
                                     "--min-healthy-ms",
                                     "1000",
                                     "--check-delay-ms",
                                     "500",
                                     "--drain-delay-ms",
                                     "500",
                                     "--controller-lease-ms",
                                     "2000",
                                     "--"};
    for (const std::string& arg : ZoneCommand()) argv.push_back(arg);
    ChildProcess controller(argv);
    EXPECT_TRUE(Eventually(
        [&] {
          const auto on_host = AgentVersions(agents_[1], "zone");
          return std::count_if(on_host.begin(), on_host.end(),
                               [](const auto& kv) { return kv.second == "v2"; }) == 2;
        },
        30s));
    controller.Signal(SIGKILL);
    controller.Wait();
    const auto list =
        json::parse(drover::testing::Http(registry_port, "GET", "/v1/deploys?service=zone").body,
                    nullptr, false);
    if (list.is_discarded() || list["deploys"].empty()) return "";
    EXPECT_EQ(list["deploys"][0]["active"], true);
    return list["deploys"][0]["id"];
  }

  // The six v2 instances a finished deploy leaves, two per host.
  static std::vector<std::string> AllV2() {
    std::vector<std::string> expected;
    for (std::size_t h = 0; h < kHosts.size(); ++h) {
      for (int n : {1, 4}) {
        expected.push_back(kHosts[h] + " zone-v2-" + std::to_string(n + static_cast<int>(h)) +
                           " v2");
      }
    }
    return expected;
  }

  // A deploy's record as the registry keeps it.
  json stored_record(const std::string& id) {
    const auto reply = drover::testing::Http(registry_.http, "GET", "/v1/deploys/" + id);
    const json deploy = json::parse(reply.body, nullptr, false);
    return deploy.is_discarded() ? json() : deploy["record"];
  }

  // Every instance of `service` on every host, as "<host> <id> <version>".
  std::vector<std::string> Fleet(const std::string& service) {
    std::vector<std::string> out;
    for (const auto& [i, a] : agents_) {
      for (const auto& [id, version] : AgentVersions(a, service)) {
        out.push_back(a.host + " " + id + " " + version);
      }
    }
    return out;
  }

  drover::testing::TempDir dir_;
  drover::testing::RegistryProcess registry_;
  std::map<std::size_t, Agent> agents_;
  std::unique_ptr<ChildProcess> gateway_;
  std::uint16_t gateway_port_ = 0;
};

TEST_F(FleetTest, AgentsRegisterAsHostsAndInstancesBindTheirHostsAddress) {
  std::map<std::string, json> agents;
  ASSERT_TRUE(Eventually(
      [&] {
        agents = Instances("drover-agent");
        return agents.size() == kHosts.size();
      },
      20s))
      << agents.size() << " agents registered";
  for (const auto& [i, a] : agents_) {
    const std::string name = "agent-" + a.host + "-" + std::to_string(a.port);
    ASSERT_EQ(agents.count(name), 1u) << name;
    const json& entry = agents[name];
    EXPECT_EQ(entry["address"], a.host + ":" + std::to_string(a.port));
    EXPECT_EQ(entry["state"], "READY");
    EXPECT_EQ(entry["zone"], "zone-" + std::to_string(i));
    EXPECT_EQ(entry["labels"]["host"], a.host);
    EXPECT_EQ(entry["labels"]["scheme"], "http");
    EXPECT_EQ(entry["labels"]["capacity"], "8");
  }

  // A zone server started through the agent on 127.0.0.3 listens, and is registered, there.
  const Agent& host3 = agents_[1];
  const json launch = {{"service", "zone"},
                       {"id", "zone-v1-1"},
                       {"version", "v1"},
                       {"argv",
                        {DROVER_BINARY, "sample", "zone", "--registry", registry_.grpc_address(),
                         "--id", "{id}", "--warmup-ms", "0", "--listen", "{host}:{port}",
                         "--health", "{host}:{health_port}", "--log-level", "warn"}}};
  const auto started =
      drover::testing::HttpTo(host3.host, host3.port, "POST", "/v1/instances", launch.dump());
  ASSERT_EQ(started.status, 200) << started.body;
  std::map<std::string, json> zone;
  ASSERT_TRUE(Eventually(
      [&] {
        zone = Instances("zone");
        return zone.count("zone-v1-1") == 1 && zone["zone-v1-1"]["state"] == "READY";
      },
      20s));
  const std::string address = zone["zone-v1-1"]["address"];
  EXPECT_EQ(address.rfind("127.0.0.3:", 0), 0u) << address;
  EXPECT_EQ(zone["zone-v1-1"]["labels"]["drover.health"].get<std::string>().rfind("127.0.0.3:", 0),
            0u);

  // An agent that stops leaves discovery at once, not when its lease runs out.
  agents_[0].process->Signal(SIGTERM);
  EXPECT_EQ(agents_[0].process->Wait(), 0);
  EXPECT_EQ(Instances("drover-agent").size(), kHosts.size() - 1);
}

TEST_F(FleetTest, RollingDeployCanaryAndRevertAcrossThreeHostsLoseNoPlayer) {
  ASSERT_TRUE(Eventually([&] { return Instances("drover-agent").size() == kHosts.size(); }, 20s));
  StartGateway();
  const DeployRun v1 = Deploy("v1", ZoneCommand());
  ASSERT_EQ(v1.exit_code, 0) << v1.out;
  ASSERT_TRUE(Eventually([&] { return ReadyCount("zone") == 6; }, 20s));
  Players players(gateway_port_, 2);
  const auto began = std::chrono::steady_clock::now();

  // 1. A rolling deploy: batch by batch, host by host, never below 5 READY.
  const DeployRun v2 = Deploy("v2", ZoneCommand());
  ASSERT_EQ(v2.exit_code, 0) << v2.out;
  EXPECT_GE(v2.min_ready, 5);
  const std::vector<std::string> expected = AllV2();
  EXPECT_EQ(Fleet("zone"), expected);
  ASSERT_EQ(v2.record["batches"].size(), 3u) << v2.out;
  for (const json& batch : v2.record["batches"]) {
    EXPECT_EQ(batch["verdict"], "pass");
    std::cout << "    batch " << batch["index"] << " on " << batch["items"][0]["host"]
              << ": gated after " << batch["gated_after_s"] << " s, done after "
              << batch["finished_after_s"] << " s\n";
  }
  // The deploy stored in the registry names each batch with its timing; each agent keeps a
  // summary for its dashboard panel.
  const json record = stored_record(v2.record.value("id", ""));
  ASSERT_EQ(record["batches"].size(), 3u) << record.dump();
  for (const json& batch : record["batches"]) {
    EXPECT_EQ(batch["verdict"], "pass");
    EXPECT_TRUE(batch.contains("started_at_ms") && batch.contains("gated_after_s") &&
                batch.contains("finished_at_ms"));
  }
  const auto kept =
      drover::testing::HttpTo(agents_[1].host, agents_[1].port, "GET", "/v1/deploys?service=zone");
  const json history = json::parse(kept.body, nullptr, false);
  ASSERT_FALSE(history.is_discarded()) << kept.body;
  EXPECT_EQ(history["deploys"][0]["verdict"], "pass");
  EXPECT_FALSE(history["deploys"][0].contains("old"));  // the launches stay in the registry

  // 2. A release that exits at boot (a flag it does not know), as a canary of one: it fails
  // there, no other host is touched, v2 keeps serving.
  std::vector<std::string> broken = ZoneCommand();
  broken.push_back("--map-cache");
  const DeployRun v3 = Deploy("v3", broken, "--canary 1 --canary-pause-ms 1000");
  EXPECT_EQ(v3.exit_code, 1) << v3.out;
  EXPECT_EQ(v3.record["batches"][0]["canary"], true);
  EXPECT_EQ(v3.record["batches"][0]["verdict"], "fail");
  EXPECT_EQ(v3.record["batches"][1]["verdict"], "pending");
  EXPECT_NE(v3.record["reason"].get<std::string>().find("crash"), std::string::npos)
      << v3.record["reason"];
  EXPECT_EQ(Fleet("zone"), expected);
  EXPECT_GE(v3.min_ready, 5);

  // 3. A release that fails on 127.0.0.4 only: batches 1-2 pass, 3 fails, and the v2 instances
  // stopped so far serve again before any v4 instance stops.
  std::vector<std::string> one_host_bad = {
      "/bin/sh", "-c",
      "if [ \"{host}\" = 127.0.0.4 ]; then echo v4: no map data on this host >&2; exit 3; fi; "
      "exec \"$0\" \"$@\""};
  for (const std::string& arg : ZoneCommand()) one_host_bad.push_back(arg);
  const DeployRun v4 = Deploy("v4", one_host_bad);
  EXPECT_EQ(v4.exit_code, 1) << v4.out;
  ASSERT_EQ(v4.record["batches"].size(), 3u) << v4.out;
  EXPECT_EQ(v4.record["batches"][0]["verdict"], "pass") << v4.record["reason"];
  EXPECT_EQ(v4.record["batches"][1]["verdict"], "pass");
  EXPECT_EQ(v4.record["batches"][2]["verdict"], "fail");
  std::size_t old_ready_at = 0, first_new_stop = 0, at = 0;
  for (const json& note : v4.record["timeline"]) {
    const std::string what = note["what"];
    ++at;
    if (what.find("the stopped old instances are READY again") != std::string::npos) {
      old_ready_at = at;
    }
    if (first_new_stop == 0 && what.rfind("stopped zone-v4-", 0) == 0) first_new_stop = at;
  }
  EXPECT_GT(old_ready_at, 0u) << v4.out;
  EXPECT_LT(old_ready_at, first_new_stop) << v4.out;
  EXPECT_EQ(Fleet("zone").size(), 6u);
  for (const std::string& i : Fleet("zone")) EXPECT_NE(i.find(" v2"), std::string::npos) << i;
  EXPECT_GE(v4.min_ready, 5);

  players.Stop();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  std::cout << "--- players: " << players.ok() << " sessions in " << seconds << " s ("
            << players.ok() / seconds << "/s), " << players.failures().size() << " failed\n";
  EXPECT_GE(players.ok() / seconds, 100);
  EXPECT_TRUE(players.failures().empty())
      << players.failures().size() << " failed, first: " << players.failures().front();
}

// An agent SIGKILLed in the middle of its batch: the deploy fails naming that host (it waited
// --host-timeout-ms for it), reverts what it can reach, and says what it could not; the agent,
// restarted, runs exactly what the record implies: its old instance the deploy never reached,
// and the new ones the record lists as left running.
TEST_F(FleetTest, AnAgentKilledMidDeployFailsItNamingTheHostAndMatchesTheRecordAfter) {
  ASSERT_TRUE(Eventually([&] { return Instances("drover-agent").size() == kHosts.size(); }, 20s));
  ASSERT_EQ(Deploy("v1", ZoneCommand()).exit_code, 0);
  Agent& victim = agents_[1];  // 127.0.0.3: batch 2
  const std::string victim_name = "agent-" + victim.host + "-" + std::to_string(victim.port);

  DeployRun v2;
  std::jthread deploy([&] { v2 = Deploy("v2", ZoneCommand(), "--host-timeout-ms 2000"); });
  ASSERT_TRUE(Eventually(
      [&] {
        const auto on_victim = AgentVersions(victim, "zone");
        return std::count_if(on_victim.begin(), on_victim.end(),
                             [](const auto& kv) { return kv.second == "v2"; }) == 2;
      },
      30s));
  // One deploy per service: a second one, now, is refused naming the running one.
  const auto second = drover::testing::RunCommand(
      std::string(DROVER_BINARY) + " deploy zone --version v9 --agents all --registry " +
      "http://127.0.0.1:" + std::to_string(registry_.http) + " -- /bin/true");
  EXPECT_EQ(second.exit_code, 4) << second.out;  // refused before anything started
  EXPECT_NE(second.out.find("of zone is running; one deploy per service at a time"),
            std::string::npos)
      << second.out;
  victim.process->Signal(SIGKILL);
  victim.process->Wait();
  deploy.join();

  EXPECT_EQ(v2.exit_code, 5) << v2.out;  // failed, and could not stop everything it started
  const std::string reason = v2.record.value("reason", "");
  EXPECT_NE(reason.find("batch 2/3: host " + victim_name + " unreachable for 2 s"),
            std::string::npos)
      << reason;
  EXPECT_EQ(v2.record["left_running"], json::array({"zone-v2-5", "zone-v2-2"})) << v2.out;
  EXPECT_NE(v2.record["timeline"].dump().find("could not start old instance zone-v1-2 on " +
                                              victim_name + " again"),
            std::string::npos);
  // The hosts it could reach are back on v1.
  EXPECT_EQ(AgentVersions(agents_[0], "zone"),
            (std::map<std::string, std::string>{{"zone-v1-1", "v1"}, {"zone-v1-4", "v1"}}));
  EXPECT_EQ(AgentVersions(agents_[2], "zone"),
            (std::map<std::string, std::string>{{"zone-v1-3", "v1"}, {"zone-v1-6", "v1"}}));

  // The registry holds the record, finished (no longer running), with what was left.
  const auto history =
      drover::testing::RunCommand(std::string(DROVER_BINARY) + " ctl --registry http://127.0.0.1:" +
                                  std::to_string(registry_.http) + " --json deploys zone");
  const json deploys = json::parse(history.out, nullptr, false);
  ASSERT_FALSE(deploys.is_discarded()) << history.out;
  const json& newest = deploys["deploys"][0];
  EXPECT_EQ(newest["active"], false);
  EXPECT_EQ(newest["record"]["version"], "v2");
  EXPECT_EQ(newest["record"]["left_running"], json::array({"zone-v2-5", "zone-v2-2"}));
  EXPECT_EQ(newest["record"]["batches"][1]["verdict"], "fail");

  // Restarted on its address and port, the agent runs what the record says is there.
  victim.process = std::make_unique<ChildProcess>(
      std::vector<std::string>{DROVER_BINARY, "--log-level", "warn", "agent", "--data-dir",
                               dir_.path() + "/agent-" + victim.host, "--listen",
                               victim.host + ":" + std::to_string(victim.port), "--registry",
                               registry_.grpc_address(), "--zone", "zone-1", "--capacity", "8"});
  ASSERT_TRUE(victim.process->ReadLine(20s).has_value());
  EXPECT_EQ(AgentVersions(victim, "zone"),
            (std::map<std::string, std::string>{
                {"zone-v1-5", "v1"}, {"zone-v2-2", "v2"}, {"zone-v2-5", "v2"}}));
}

// `drover rollout` steers a running deploy through the registry: the canary waits until it is
// promoted, a pause holds the deploy after the batch it is in, resume lets it go on, and abort
// fails it and reverts it.
TEST_F(FleetTest, RolloutPromotesPausesResumesAndAbortsADeploy) {
  ASSERT_TRUE(Eventually([&] { return Instances("drover-agent").size() == kHosts.size(); }, 20s));
  ASSERT_EQ(Deploy("v1", ZoneCommand()).exit_code, 0);
  const std::string registry = "http://127.0.0.1:" + std::to_string(registry_.http);
  const auto stored = [&](const std::string& id) {
    const auto reply = drover::testing::Http(registry_.http, "GET", "/v1/deploys/" + id);
    return json::parse(reply.body, nullptr, false);
  };
  const auto rollout = [&](const std::string& verb, const std::string& id) {
    return drover::testing::RunCommand(std::string(DROVER_BINARY) + " rollout " + verb + " " + id +
                                       " --registry " + registry);
  };

  DeployRun v2;
  std::jthread deploy([&] { v2 = Deploy("v2", ZoneCommand(), "--canary 1"); });
  std::string id;
  ASSERT_TRUE(Eventually(
      [&] {
        const auto list = json::parse(
            drover::testing::Http(registry_.http, "GET", "/v1/deploys?service=zone").body, nullptr,
            false);
        if (list.is_discarded() || list["deploys"].empty() || !list["deploys"][0]["active"]) {
          return false;
        }
        id = list["deploys"][0]["id"];
        return true;
      },
      20s));
  // 1. The canary passed and waits: nothing else starts until it is promoted.
  ASSERT_TRUE(Eventually(
      [&] { return stored(id)["record"].value("state", "").starts_with("canary passed"); }, 30s));
  std::this_thread::sleep_for(1500ms);
  EXPECT_FALSE(stored(id)["record"]["batches"][1].contains("started_at_ms"));
  const auto status = rollout("status", id);
  EXPECT_EQ(status.exit_code, 0) << status.out;
  EXPECT_NE(status.out.find("canary passed, waiting for promote"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("canary batch 1: pass"), std::string::npos) << status.out;

  // 2. Promoted, and at once asked to pause: it holds after the batch it is in.
  ASSERT_EQ(rollout("promote", id).exit_code, 0);
  ASSERT_TRUE(Eventually(
      [&] { return stored(id)["record"]["batches"][1].contains("started_at_ms"); }, 20s));
  ASSERT_EQ(rollout("pause", id).exit_code, 0);
  ASSERT_TRUE(Eventually([&] { return stored(id)["record"].value("state", "") == "paused"; }, 30s));
  const json paused = stored(id)["record"];
  std::this_thread::sleep_for(1500ms);
  const std::size_t next = paused["batches"][2].contains("started_at_ms") ? 3 : 2;
  EXPECT_FALSE(stored(id)["record"]["batches"][next].contains("started_at_ms"));

  // 3. Resumed, it goes on; aborted in its next batch, it fails and reverts.
  ASSERT_EQ(rollout("resume", id).exit_code, 0);
  ASSERT_TRUE(Eventually(
      [&] { return stored(id)["record"]["batches"][next].contains("started_at_ms"); }, 20s));
  ASSERT_EQ(rollout("abort", id).exit_code, 0);
  deploy.join();
  EXPECT_EQ(v2.exit_code, 1) << v2.out;
  EXPECT_NE(v2.record.value("reason", "").find("aborted (drover rollout abort)"), std::string::npos)
      << v2.record["reason"];
  EXPECT_EQ(Fleet("zone").size(), 6u);
  for (const std::string& i : Fleet("zone")) EXPECT_NE(i.find(" v1"), std::string::npos) << i;
  // A finished deploy takes no more requests.
  const auto late = rollout("pause", id);
  EXPECT_EQ(late.exit_code, 1);
  EXPECT_NE(late.out.find("is not running"), std::string::npos) << late.out;
}

// --agents picks hosts by label: only the matching agents get instances; none matching is a
// usage error that says what is registered.
TEST_F(FleetTest, AnAgentSelectorPlacesOnlyOnMatchingHosts) {
  ASSERT_TRUE(Eventually([&] { return Instances("drover-agent").size() == kHosts.size(); }, 20s));
  const std::string base = std::string(DROVER_BINARY) +
                           " --log-level warn deploy zone --version v1 --instances 2 "
                           "--max-surge 100% --min-healthy-ms 1000 --check-delay-ms 500 "
                           "--registry http://127.0.0.1:" +
                           std::to_string(registry_.http);
  std::string command;
  for (const std::string& arg : ZoneCommand()) command += " '" + arg + "'";
  const auto none = drover::testing::RunCommand(base + " --agents zone=nowhere --" + command);
  EXPECT_EQ(none.exit_code, 2) << none.out;
  EXPECT_NE(none.out.find("no READY agent matches --agents 'zone=nowhere' (registered: agent-"),
            std::string::npos)
      << none.out;
  const auto placed = drover::testing::RunCommand(base + " --agents zone=zone-1 --" + command);
  ASSERT_EQ(placed.exit_code, 0) << placed.out;
  EXPECT_EQ(Fleet("zone"),
            (std::vector<std::string>{"127.0.0.3 zone-v1-1 v1", "127.0.0.3 zone-v1-2 v1"}));
}

// The controller SIGKILLed in the middle of a batch: its lease in the record lapses, and
// `drover rollout resume` takes the deploy over from the stored state and finishes it. Every
// agent and the registry then hold exactly the new version: no orphan, no duplicate.
TEST_F(FleetTest, AControllerKilledMidBatchIsResumedFromTheStoredDeploy) {
  ASSERT_TRUE(Eventually([&] { return Instances("drover-agent").size() == kHosts.size(); }, 20s));
  ASSERT_EQ(Deploy("v1", ZoneCommand()).exit_code, 0);
  const std::string registry = "http://127.0.0.1:" + std::to_string(registry_.http);
  const std::string id = KillControllerInBatch2(registry_.http);
  ASSERT_FALSE(id.empty());

  // While its lease holds, resume would only ask the (dead) controller; after it, a takeover.
  std::this_thread::sleep_for(2500ms);
  const auto began = std::chrono::steady_clock::now();
  const auto resumed =
      drover::testing::RunCommand(std::string(DROVER_BINARY) + " --log-level warn rollout resume " +
                                  id + " --registry " + registry + " --json");
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  std::cout << "--- rollout resume " << id << ": exit " << resumed.exit_code << " in " << took
            << " s\n";
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  const json record = stored_record(id);
  EXPECT_EQ(record["verdict"], "pass") << record["reason"];
  EXPECT_NE(record["timeline"].dump().find("resumed by"), std::string::npos);
  EXPECT_EQ(Fleet("zone"), AllV2());
  std::map<std::string, json> registered;
  ASSERT_TRUE(Eventually(
      [&] {
        registered = Instances("zone");
        return registered.size() == 6;
      },
      10s))
      << registered.size();
  for (const auto& [iid, entry] : registered) {
    EXPECT_EQ(iid.rfind("zone-v2-", 0), 0u) << iid;
    EXPECT_EQ(entry["state"], "READY") << iid;
  }
}

// Two registries over one etcd: the fleet registers through the first, a deploy starts through
// it, its controller dies, and `drover rollout resume` through the second finishes it -- the
// deploy is in etcd, not in a registry process.
class EtcdFleetTest : public FleetTest {
 protected:
  void StartRegistries() override {
    ASSERT_TRUE(etcd_.ok()) << etcd_.error();
    const std::vector<std::string> flags = {
        "--store",       "etcd",        "--etcd-endpoints", etcd_.endpoints_csv(),
        "--etcd-prefix", "/fleet",      "--http",           "127.0.0.1:0",
        "--grpc",        "127.0.0.1:0", "--tick-ms",        "100"};
    registry_ = drover::testing::StartRegistryProcess(DROVER_BINARY, flags);
    other_ = drover::testing::StartRegistryProcess(DROVER_BINARY, flags);
    ASSERT_NE(registry_.http, 0) << registry_.line;
    ASSERT_NE(other_.http, 0) << other_.line;
  }

  drover::testing::EtcdCluster etcd_{1};
  drover::testing::RegistryProcess other_;
};

TEST_F(EtcdFleetTest, ADeployStartedThroughOneRegistryIsResumedThroughTheOther) {
  ASSERT_TRUE(Eventually([&] { return Instances("drover-agent").size() == kHosts.size(); }, 20s));
  ASSERT_EQ(Deploy("v1", ZoneCommand()).exit_code, 0);
  const std::string started = KillControllerInBatch2(registry_.http);
  ASSERT_FALSE(started.empty());
  // The other registry sees the deploy, running, as the first stored it.
  const auto seen = json::parse(
      drover::testing::Http(other_.http, "GET", "/v1/deploys?service=zone").body, nullptr, false);
  ASSERT_FALSE(seen.is_discarded());
  const std::string id = seen["deploys"][0]["id"];
  EXPECT_EQ(id, started);
  EXPECT_EQ(seen["deploys"][0]["active"], true);
  EXPECT_EQ(seen["deploys"][0]["record"]["version"], "v2");

  std::this_thread::sleep_for(2500ms);
  const auto resumed = drover::testing::RunCommand(
      std::string(DROVER_BINARY) + " --log-level warn rollout resume " + id +
      " --registry http://127.0.0.1:" + std::to_string(other_.http));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  std::cout << "--- resumed through the other registry: " << resumed.out;
  EXPECT_EQ(Fleet("zone"), AllV2());
  EXPECT_EQ(stored_record(id)["verdict"], "pass");
  ASSERT_TRUE(Eventually([&] { return ReadyCount("zone") == 6; }, 10s));
}

}  // namespace
