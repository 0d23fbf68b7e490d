#include "registry/json_codec.h"

#include <algorithm>
#include <chrono>
#include <limits>

namespace drover::registry {
namespace {

Status TypeError(const char* name, const char* type) {
  return InvalidArgumentError(std::string("field '") + name + "' must be " + type);
}

}  // namespace

std::string DumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json InstanceToJson(const Instance& in) {
  nlohmann::json j = {
      {"service", in.service},
      {"id", in.id},
      {"address", in.spec.address},
      {"generation", in.spec.generation},
      {"state", InstanceStateName(in.spec.state)},
      {"ttl_ms", in.spec.ttl_ms},
      {"weight", in.spec.weight},
      {"zone", in.spec.zone},
      {"labels", in.spec.labels},
      {"version", in.spec.version},
      {"accepting", in.spec.accepting},
      {"create_revision", in.create_revision},
      {"mod_revision", in.mod_revision},
  };
  if (in.ready_since != SystemTime{}) j["ready_since_ms"] = ToUnixMillis(in.ready_since);
  return j;
}

nlohmann::json EventToJson(const Event& e) {
  nlohmann::json j = {{"type", EventTypeName(e.type)}, {"revision", e.revision}};
  switch (e.type) {
    case EventType::kPut:
      j["instance"] = InstanceToJson(e.instance);
      break;
    case EventType::kDelete:
      j["instance"] = InstanceToJson(e.instance);
      j["reason"] = RemovalReasonName(e.reason);
      break;
    case EventType::kResync: {
      nlohmann::json instances = nlohmann::json::array();
      for (const Instance& in : e.snapshot) instances.push_back(InstanceToJson(in));
      j["instances"] = std::move(instances);
      j["degraded"] = e.degraded;
      break;
    }
    case EventType::kProgress:
      j["degraded"] = e.degraded;
      break;
  }
  return j;
}

Result<nlohmann::json> ParseObject(std::string_view body,
                                   std::initializer_list<std::string_view> allowed) {
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError("body is not valid JSON");
  if (!j.is_object()) return InvalidArgumentError("body must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return InvalidArgumentError("unknown field '" + key + "'");
    }
  }
  return j;
}

Result<std::uint64_t> GetUint(const nlohmann::json& object, const char* name, bool required,
                              std::uint64_t fallback) {
  auto it = object.find(name);
  if (it == object.end()) {
    if (required) return InvalidArgumentError(std::string("missing field '") + name + "'");
    return fallback;
  }
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<std::int64_t>() >= 0)) {
    return TypeError(name, "a non-negative integer");
  }
  return it->get<std::uint64_t>();
}

Result<std::string> GetString(const nlohmann::json& object, const char* name, bool required,
                              std::string fallback) {
  auto it = object.find(name);
  if (it == object.end()) {
    if (required) return InvalidArgumentError(std::string("missing field '") + name + "'");
    return fallback;
  }
  if (!it->is_string()) return TypeError(name, "a string");
  return it->get<std::string>();
}

Result<bool> GetBool(const nlohmann::json& object, const char* name, bool fallback) {
  auto it = object.find(name);
  if (it == object.end()) return fallback;
  if (!it->is_boolean()) return TypeError(name, "true or false");
  return it->get<bool>();
}

Result<InstanceSpec> SpecFromJson(std::string_view body) {
  DROVER_ASSIGN_OR_RETURN(
      auto j, ParseObject(body, {"address", "generation", "state", "ttl_ms", "weight", "zone",
                                 "labels", "version", "accepting"}));
  InstanceSpec spec;
  DROVER_ASSIGN_OR_RETURN(spec.address, GetString(j, "address", true));
  DROVER_ASSIGN_OR_RETURN(spec.generation, GetUint(j, "generation", true));
  DROVER_ASSIGN_OR_RETURN(std::string state, GetString(j, "state", false, "STARTING"));
  DROVER_ASSIGN_OR_RETURN(spec.state, ParseInstanceState(state));
  DROVER_ASSIGN_OR_RETURN(std::uint64_t ttl,
                          GetUint(j, "ttl_ms", false, static_cast<std::uint64_t>(spec.ttl_ms)));
  if (ttl > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return InvalidArgumentError("field 'ttl_ms' is out of range");
  }
  spec.ttl_ms = static_cast<std::int64_t>(ttl);
  DROVER_ASSIGN_OR_RETURN(std::uint64_t weight, GetUint(j, "weight", false, spec.weight));
  if (weight > std::numeric_limits<std::uint32_t>::max()) {
    return InvalidArgumentError("field 'weight' is out of range");
  }
  spec.weight = static_cast<std::uint32_t>(weight);
  DROVER_ASSIGN_OR_RETURN(spec.zone, GetString(j, "zone", false));
  DROVER_ASSIGN_OR_RETURN(spec.version, GetString(j, "version", false));
  DROVER_ASSIGN_OR_RETURN(spec.accepting, GetBool(j, "accepting", true));
  if (auto it = j.find("labels"); it != j.end()) {
    if (!it->is_object()) return TypeError("labels", "an object of strings");
    for (const auto& [key, value] : it->items()) {
      if (!value.is_string()) return TypeError("labels", "an object of strings");
      spec.labels[key] = value.get<std::string>();
    }
  }
  return spec;
}

Result<StoredDeploy> DeployFromRecord(const std::string& id, const std::string& record_json,
                                      bool active) {
  const auto record = nlohmann::json::parse(record_json, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object() || !record.contains("service") || !record["service"].is_string()) {
    return InvalidArgumentError("a deploy record is a JSON object with a service");
  }
  StoredDeploy d;
  d.id = id;
  d.service = record["service"].get<std::string>();
  d.record = record_json;
  d.active = active;
  return d;
}

}  // namespace drover::registry
