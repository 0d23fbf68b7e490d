// Clients of the deploy controller's peers, over their HTTP APIs: the agent as a Platform, and
// the registry as the deploy's readiness source and janitor. Shared by `drover deploy` and
// `drover demo`.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "http_client.h"
#include "rollout/platform.h"

namespace drover::cli {

// The Platform of a `drover agent`, over its HTTP API.
class AgentClient final : public rollout::Platform {
 public:
  explicit AgentClient(HttpClient client) : client_(std::move(client)) {}

  Status Start(const rollout::LaunchSpec& spec) override;
  Status Stop(const std::string& id, Duration grace) override;
  Result<std::vector<rollout::InstanceInfo>> List(const std::string& service) override;
  // Stores a deploy record (PUT /v1/deploys/{id}).
  Status Record(const std::string& id, const nlohmann::json& record);

 private:
  Result<nlohmann::json> Call(std::string_view method, const std::string& target,
                              const std::string& body = {});

  HttpClient client_;
};

// The registry's instances of `service` (GET /v1/services/{service}/instances).
Result<nlohmann::json> RegistryInstances(const HttpClient& registry, const std::string& service);

// READY and accepting per instance id.
Result<std::map<std::string, bool>> RegistryReadiness(const HttpClient& registry,
                                                      const std::string& service);

// Deregisters the entry a stopped instance left behind, at the generation it holds now (fenced:
// a newer registration in between is not touched). False when there was none.
Result<bool> RegistryForget(const HttpClient& registry, const std::string& service,
                            const std::string& id);

}  // namespace drover::cli
