#include "rollout/agent_client.h"

#include "common/http_error.h"
#include "rollout/json_codec.h"

namespace drover::rollout {

using json = nlohmann::json;

Status AgentClient::Start(const LaunchSpec& spec) {
  return Call("POST", "/v1/instances", LaunchSpecToJson(spec).dump()).status();
}

Status AgentClient::Stop(const std::string& id, Duration grace) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(grace).count();
  return Call("DELETE", "/v1/instances/" + id + "?grace_ms=" + std::to_string(ms)).status();
}

Result<std::vector<InstanceInfo>> AgentClient::List(const std::string& service) {
  DROVER_ASSIGN_OR_RETURN(json body, Call("GET", "/v1/instances?service=" + service));
  std::vector<InstanceInfo> out;
  for (const json& i : body.at("instances")) {
    DROVER_ASSIGN_OR_RETURN(InstanceInfo info, InstanceInfoFromJson(i));
    out.push_back(std::move(info));
  }
  return out;
}

Status AgentClient::Record(const std::string& id, const json& record) {
  return Call("PUT", "/v1/deploys/" + id, record.dump()).status();
}

Result<json> AgentClient::Call(std::string_view method, const std::string& target,
                               const std::string& body) {
  DROVER_ASSIGN_OR_RETURN(net::HttpResult reply, client_.Send(method, target, body));
  json parsed = json::parse(reply.body, nullptr, false);
  if (reply.status != 200) return StatusOfErrorReply(reply.status, reply.body, "agent");
  if (parsed.is_discarded()) return UnavailableError("agent sent a reply that is not JSON");
  return parsed;
}

Result<json> RegistryInstances(const net::HttpClient& registry, const std::string& service) {
  DROVER_ASSIGN_OR_RETURN(net::HttpResult reply,
                          registry.Send("GET", "/v1/services/" + service + "/instances"));
  if (reply.status != 200) {
    return UnavailableError("registry answered " + std::to_string(reply.status));
  }
  json body = json::parse(reply.body, nullptr, false);
  if (body.is_discarded() || !body.contains("instances") || !body["instances"].is_array()) {
    return UnavailableError("registry sent a reply that is not a list");
  }
  return std::move(body["instances"]);
}

Result<std::map<std::string, bool>> RegistryReadiness(const net::HttpClient& registry,
                                                      const std::string& service) {
  DROVER_ASSIGN_OR_RETURN(const json instances, RegistryInstances(registry, service));
  std::map<std::string, bool> out;
  for (const json& in : instances) {
    out[in.value("id", "")] = in.value("state", "") == "READY" && in.value("accepting", false);
  }
  return out;
}

Result<bool> RegistryForget(const net::HttpClient& registry, const std::string& service,
                            const std::string& id) {
  DROVER_ASSIGN_OR_RETURN(const json instances, RegistryInstances(registry, service));
  for (const json& in : instances) {
    if (in.value("id", "") != id) continue;
    const std::uint64_t generation = in.value("generation", std::uint64_t{0});
    DROVER_ASSIGN_OR_RETURN(
        net::HttpResult reply,
        registry.Send("DELETE", "/v1/services/" + service + "/instances/" + id +
                                    "?generation=" + std::to_string(generation)));
    if (reply.status == 404) return false;  // it deregistered itself meanwhile
    if (reply.status != 200) {
      return UnavailableError("registry answered " + std::to_string(reply.status) + ": " +
                              reply.body);
    }
    return true;
  }
  return false;
}

DeployOutcome DeployThroughAgent(AgentClient& agent, net::HttpClient registry, Clock& clock,
                                 const DeploySpec& spec, std::stop_token stop) {
  Deployer deployer(
      agent, [&](const std::string& service) { return RegistryReadiness(registry, service); },
      [&](const std::string& id, const json& record) { return agent.Record(id, record); }, clock,
      [&](const std::string& service, const std::string& id) {
        return RegistryForget(registry, service, id);
      });
  return deployer.Run(spec, std::move(stop));
}

}  // namespace drover::rollout
