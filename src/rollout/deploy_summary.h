// A deploy as people read it: `drover rollout status` and the like. Pure formatting.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace drover::rollout {

// Lines describing a deploy as the registry keeps it ({id, active, record}): its service,
// version and state, its reason, what its controller was asked, each batch with its verdict,
// hosts and gate time, and what was left running.
std::string DeploySummary(const nlohmann::json& deploy);

}  // namespace drover::rollout
