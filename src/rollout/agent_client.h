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

// Runs one deploy through a `drover agent` (its instances and its deploy history), judged
// against the registry at `registry` (readiness; and the entries stopped instances left behind
// are deregistered). What `drover deploy` and the demo run.
DeployOutcome DeployThroughAgent(AgentClient& agent, net::HttpClient registry, Clock& clock,
                                 const DeploySpec& spec, std::stop_token stop);

}  // namespace drover::rollout
