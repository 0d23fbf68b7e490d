// The steps of `drover demo`: each replays one of the mission's incidents against the running
// fleet (or in process, where the incident is about a library) and reports figures with their
// bounds. Run from the demo's main thread, one after the other.
#pragma once

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "agent_client.h"
#include "demo_fleet.h"
#include "drover/clock.h"
#include "rollout/deployer.h"

namespace drover::cli::demo {

// One line of the report. An empty bound marks a figure shown for contrast (the incident's
// behaviour), which is never judged.
struct Figure {
  std::string name;
  std::string value;
  std::string bound;
  bool ok = true;
};

struct StepReport {
  int number = 0;
  std::string title;
  std::vector<Figure> figures;
  nlohmann::json data;  // the same figures as numbers, for --report
  bool ok() const;
};

// When each instance of the watched services was first seen READY and accepting in the registry
// (polled every 100 ms on a thread of its own), and which are now.
class ReadyWatch {
 public:
  ReadyWatch(HttpClient registry, std::vector<std::string> services);
  ~ReadyWatch();

  // The first time `id` was seen READY; nullopt if never.
  std::optional<MonoTime> ReadySince(const std::string& id) const;
  std::set<std::string> ReadyNow(const std::string& service) const;
  // Waits until every id has been seen READY; false at the deadline or on stop.
  bool WaitReady(const std::vector<std::string>& ids, Duration limit, std::stop_token stop) const;

 private:
  void Poll(std::stop_token stop);

  HttpClient registry_;
  std::vector<std::string> services_;
  mutable std::mutex mu_;
  std::map<std::string, MonoTime> first_ready_;             // guarded by mu_
  std::map<std::string, std::set<std::string>> ready_now_;  // guarded by mu_
  std::jthread poller_;
};

struct Context {
  Fleet& fleet;
  AgentClient& agent;
  HttpClient& registry;
  ReadyWatch& ready;
  Clock& clock;
  std::stop_token stop;
};

// Deploys `version` of the zone servers (3 instances) through the agent and the health gate.
// crash_after > 0 makes every new instance abort that many seconds after it is READY.
rollout::DeployOutcome DeployZone(Context& c, const std::string& version, double crash_after);

// Step 2: a failing job surfaced as terminal by Drover's waiter, next to the incident's waiter.
StepReport JobResultsStep(Clock& clock, std::stop_token stop);
// Step 3: shard scale-out 4 -> 5 on the router against hash % n, and a hot key.
StepReport ShardStep();
// Step 4: gRPC calls through one address vs the Drover channel; 3 -> 5 servers.
StepReport GrpcStep(Context& c);

std::string Fixed(double value, int digits);
double Seconds(Duration d);

}  // namespace drover::cli::demo
