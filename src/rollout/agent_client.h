// Clients of the deploy controller's peers, over their HTTP APIs: the agent as a Platform, and
// the registry as the deploy's readiness source and janitor. Shared by `drover deploy` and
// `drover demo`. Not thread-safe: one per thread (each holds an HttpClient).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <vector>

#include "drover/clock.h"
#include "net/http_client.h"
#include "rollout/deployer.h"
#include "rollout/platform.h"

namespace drover::rollout {

// The Platform of a `drover agent`, over its HTTP API.
class AgentClient final : public Platform {
 public:
  explicit AgentClient(net::HttpClient client) : client_(std::move(client)) {}

  Status Start(const LaunchSpec& spec) override;
  Status Stop(const std::string& id, Duration grace) override;
  Result<std::vector<InstanceInfo>> List(const std::string& service) override;
  // Stores a deploy record (PUT /v1/deploys/{id}).
  Status Record(const std::string& id, const nlohmann::json& record);

 private:
  Result<nlohmann::json> Call(std::string_view method, const std::string& target,
                              const std::string& body = {});

  net::HttpClient client_;
};

// The registry's instances of `service` (GET /v1/services/{service}/instances).
Result<nlohmann::json> RegistryInstances(const net::HttpClient& registry,
                                         const std::string& service);

// READY and accepting per instance id.
Result<std::map<std::string, bool>> RegistryReadiness(const net::HttpClient& registry,
                                                      const std::string& service);

// Deregisters the entry a stopped instance left behind, at the generation it holds now (fenced:
// a newer registration in between is not touched). False when there was none.
Result<bool> RegistryForget(const net::HttpClient& registry, const std::string& service,
                            const std::string& id);

// Marks an instance DRAINING in the registry at the generation it holds now (true), before it
// is stopped; false when the registry does not hold it, or it drains already.
Result<bool> RegistryDrain(const net::HttpClient& registry, const std::string& service,
                           const std::string& id);

// Keeps a deploy's record in the registry (PUT /v1/deploys/{id}), version after version: the
// record holds its service's "running deploy" marker until it has a finished_at_ms. The first
// write fails FAILED_PRECONDITION, naming the running deploy, when another deploy of the service
// runs. A write that lost to another writer (ABORTED: `drover rollout` asking something of the
// deploy) reads the stored record and writes again, keeping the stored "control" member. One
// per deploy; not thread-safe.
//
// Ownership: when the stored record names another controller than this one (`owner`) or the one
// it took over from (`replaced`), the deploy was taken over: Save returns ABORTED "... taken
// over by ..." and the Deployer stops at once.
class RegistryDeployLog {
 public:
  // A new deploy: version 0. A takeover: the stored version, and the owner it replaces.
  RegistryDeployLog(const net::HttpClient& registry, std::string owner, std::uint64_t version = 0,
                    std::string replaced = "")
      : registry_(registry),
        owner_(std::move(owner)),
        replaced_(std::move(replaced)),
        version_(version) {}
  Status Save(const std::string& id, const nlohmann::json& record);
  std::uint64_t version() const { return version_; }

 private:
  const net::HttpClient& registry_;
  const std::string owner_;
  const std::string replaced_;
  std::uint64_t version_ = 0;
  nlohmann::json control_;  // the latest request read back from the registry; kept in every write
};

// A deploy as the registry keeps it: {id, service, version, active, created_ms, record}.
// NOT_FOUND for an unknown id.
Result<nlohmann::json> RegistryDeploy(const net::HttpClient& registry, const std::string& id);

// Asks a running deploy to "pause", "resume", "abort" or "promote": writes the request into its
// record in the registry ({"control": {"request", "at_ms"}}; compare-and-set, tried again when
// the controller wrote in between), where its controller reads it. Returns the deploy as stored
// after. INVALID_ARGUMENT for another verb; FAILED_PRECONDITION when the deploy is not running.
Result<nlohmann::json> RequestRollout(const net::HttpClient& registry, const std::string& id,
                                      const std::string& request);

// An agent of the fleet as the registry lists it (service drover-agent).
struct AgentTarget {
  std::string name;  // its id in discovery
  std::string url;   // scheme://address
  std::string zone;
  int capacity = 0;
  std::map<std::string, std::string> labels;
};

// The READY agents whose labels (zone included) match `selector`: "" or "all" for every one,
// else "key=value[,key=value...]". Sorted by name. INVALID_ARGUMENT for a malformed selector;
// NOT_FOUND when none matches (naming what is registered).
Result<std::vector<AgentTarget>> DiscoverAgents(const net::HttpClient& registry,
                                                const std::string& selector);

// The agents a deploy names: `urls` (each its own host, named by its address; none: the local
// agent at http://127.0.0.1:7080), or, with a `selector`, the registered agents it matches.
Result<std::vector<AgentTarget>> AgentTargets(const std::vector<std::string>& urls,
                                              const std::string& selector,
                                              const net::HttpClient& registry);

// One host of a deploy: an agent's client and what placement needs to know of it.
struct AgentHost {
  std::string name;
  std::string url;  // kept in the deploy record: where a resuming controller finds the agent
  std::string zone;
  int capacity = 0;
  AgentClient* client = nullptr;
};

// Runs one deploy over `agents` (their instances), judged against the registry at `registry`
// (readiness; instances are marked DRAINING there before they stop, and the entries stopped
// instances left behind are deregistered). The deploy record is kept in the registry
// (RegistryDeployLog: one running deploy per service) and by each agent (its dashboard panel).
// What `drover deploy` and the demo run.
DeployOutcome DeployThroughAgents(const std::vector<AgentHost>& agents, net::HttpClient registry,
                                  Clock& clock, const DeploySpec& spec, std::stop_token stop);
// Takes over a deploy whose controller died (its lease in the record lapsed) and brings it to an
// end from where it stands (Deployer::Resume), over `agents` -- which must include every host
// the record names -- keeping the record in the registry as DeployThroughAgents does.
// `deploy` is the registry's entry ({id, version, active, record}).
DeployOutcome ResumeThroughAgents(const nlohmann::json& deploy,
                                  const std::vector<AgentHost>& agents, net::HttpClient registry,
                                  Clock& clock, std::stop_token stop);

// Whether the controller named in a deploy's record still holds it (its lease has not lapsed).
bool ControllerAlive(const nlohmann::json& deploy);

// "host:pid": names this controller in deploy records.
std::string ControllerName();

// The same on one agent.
DeployOutcome DeployThroughAgent(AgentClient& agent, net::HttpClient registry, Clock& clock,
                                 const DeploySpec& spec, std::stop_token stop);

}  // namespace drover::rollout
