#include "rollout/json_codec.h"

namespace drover::rollout {
using json = nlohmann::json;

json LaunchSpecToJson(const LaunchSpec& spec) {
  return {{"service", spec.service},
          {"id", spec.id},
          {"version", spec.version},
          {"argv", spec.argv},
          {"env", spec.env}};
}

Result<LaunchSpec> LaunchSpecFromJson(const json& j) {
  try {
    LaunchSpec spec;
    spec.service = j.at("service").get<std::string>();
    spec.id = j.at("id").get<std::string>();
    spec.version = j.value("version", std::string());
    spec.argv = j.at("argv").get<std::vector<std::string>>();
    spec.env = j.value("env", std::map<std::string, std::string>());
    DROVER_RETURN_IF_ERROR(ValidateLaunchSpec(spec));
    return spec;
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("bad launch spec: ") + e.what());
  }
}

json InstanceInfoToJson(const InstanceInfo& info) {
  json events = json::array();
  for (const InstanceEvent& e : info.events) {
    events.push_back({{"kind", std::string(EventKindName(e.kind))},
                      {"at_ms", ToUnixMillis(e.at)},
                      {"detail", e.detail}});
  }
  json out = LaunchSpecToJson(info.spec);
  out["status"] = std::string(InstanceStatusName(info.status));
  out["pid"] = info.pid;
  out["events"] = std::move(events);
  return out;
}

Result<InstanceInfo> InstanceInfoFromJson(const json& j) {
  try {
    InstanceInfo info;
    DROVER_ASSIGN_OR_RETURN(info.spec, LaunchSpecFromJson(j));
    DROVER_ASSIGN_OR_RETURN(info.status, ParseInstanceStatus(j.at("status").get<std::string>()));
    info.pid = j.at("pid").get<int>();
    for (const json& e : j.at("events")) {
      InstanceEvent event;
      DROVER_ASSIGN_OR_RETURN(event.kind, ParseEventKind(e.at("kind").get<std::string>()));
      event.at = FromUnixMillis(e.at("at_ms").get<std::int64_t>());
      event.detail = e.at("detail").get<std::string>();
      info.events.push_back(std::move(event));
    }
    return info;
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("bad instance: ") + e.what());
  }
}

}  // namespace drover::rollout
