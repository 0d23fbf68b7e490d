// The steps of `drover demo`: each replays one of the incidents (docs/requirements.md) against the
// running fleet (or in process, where the incident is about a library) and reports figures with
// their bounds. Run from the demo's main thread, one after the other.
#pragma once

#include <stop_token>
#include <string>
#include <vector>

#include "demo/fleet.h"
#include "demo/ready_watch.h"
#include "demo/report.h"
#include "drover/clock.h"
#include "net/http_client.h"
#include "rollout/agent_client.h"
#include "rollout/deployer.h"

namespace drover::demo {

struct Context {
  Fleet& fleet;
  std::vector<rollout::AgentHost> hosts;  // the three agents, in host order
  net::HttpClient& registry;
  ReadyWatch& ready;
  Clock& clock;
  std::stop_token stop;
};

// Deploys `version` of the zone servers (3 instances, one per host) through the agents and the
// health gate.
// crash_after > 0 makes every new instance abort that many seconds after it is READY.
rollout::DeployOutcome DeployZone(Context& c, const std::string& version, double crash_after);

// Step 2: a failing job surfaced as terminal by Drover's waiter, next to the incident's waiter.
StepReport JobResultsStep(Clock& clock, std::stop_token stop);
// Step 3: shard scale-out 4 -> 5 running servers behind the gateway's key-routed listener: keys
// moved measured from real sessions (beside hash % n, computed), and a hot key's spread.
StepReport ShardStep(Context& c);
// Step 4: gRPC calls through one address vs the Drover channel; 3 -> 5 servers.
StepReport GrpcStep(Context& c);

}  // namespace drover::demo
