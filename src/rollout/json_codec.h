// JSON forms of the rollout model, shared by the agent's HTTP API, its state file and
// AgentClient. Parsing is strict about types and required members.
#pragma once

#include <nlohmann/json.hpp>

#include "rollout/platform.h"

namespace drover::rollout {

nlohmann::json LaunchSpecToJson(const LaunchSpec& spec);
Result<LaunchSpec> LaunchSpecFromJson(const nlohmann::json& j);

nlohmann::json InstanceInfoToJson(const InstanceInfo& info);
Result<InstanceInfo> InstanceInfoFromJson(const nlohmann::json& j);

}  // namespace drover::rollout
