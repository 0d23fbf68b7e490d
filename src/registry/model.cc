#include "registry/model.h"

#include <charconv>

#include "common/host_port.h"

namespace drover::registry {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// Printable ASCII without spaces or quotes: safe in logs, URLs and label selectors.
bool IsPlainText(std::string_view s) {
  for (char c : s) {
    if (c <= ' ' || c > '~' || c == '"' || c == '\\') return false;
  }
  return true;
}

Status Invalid(std::string msg) { return InvalidArgumentError(std::move(msg)); }

}  // namespace

std::string_view InstanceStateName(InstanceState state) {
  switch (state) {
    case InstanceState::kStarting:
      return "STARTING";
    case InstanceState::kReady:
      return "READY";
    case InstanceState::kDraining:
      return "DRAINING";
  }
  return "UNKNOWN";
}

Result<InstanceState> ParseInstanceState(std::string_view name) {
  if (name == "STARTING") return InstanceState::kStarting;
  if (name == "READY") return InstanceState::kReady;
  if (name == "DRAINING") return InstanceState::kDraining;
  return Invalid("state must be STARTING, READY or DRAINING, got '" + std::string(name) + "'");
}

std::string_view RemovalReasonName(RemovalReason reason) {
  switch (reason) {
    case RemovalReason::kTtl:
      return "ttl";
    case RemovalReason::kDeregister:
      return "deregister";
    case RemovalReason::kDrain:
      return "drain";
    case RemovalReason::kFence:
      return "fence";
  }
  return "unknown";
}

std::string_view EventTypeName(EventType type) {
  switch (type) {
    case EventType::kPut:
      return "PUT";
    case EventType::kDelete:
      return "DELETE";
    case EventType::kResync:
      return "RESYNC";
    case EventType::kProgress:
      return "PROGRESS";
  }
  return "UNKNOWN";
}

Status ValidateName(std::string_view what, std::string_view name, const Limits& limits) {
  if (name.empty() || name.size() > limits.max_name) {
    return Invalid(std::string(what) + " must be 1.." + std::to_string(limits.max_name) +
                   " characters long");
  }
  if (name.front() == '.' || name.front() == '-') {
    return Invalid(std::string(what) + " must not start with '.' or '-'");
  }
  for (char c : name) {
    if (!IsNameChar(c)) {
      return Invalid(std::string(what) + " may only contain letters, digits, '.', '_' and '-'");
    }
  }
  return Status::Ok();
}

Status ValidateSpec(const InstanceSpec& spec, const Limits& limits) {
  if (spec.address.empty() || spec.address.size() > limits.max_address ||
      !IsPlainText(spec.address)) {
    return Invalid("address must be host:port (at most " + std::to_string(limits.max_address) +
                   " characters)");
  }
  // The replies say which part of the address is wrong in the words they always used.
  HostPortFault fault = HostPortFault::kNone;
  if (!ParseHostPort(spec.address, "address", {}, &fault).ok()) {
    return Invalid(fault == HostPortFault::kPort
                       ? std::string("address port must be 1..65535")
                       : "address must be host:port (at most " +
                             std::to_string(limits.max_address) + " characters)");
  }
  if (spec.generation == 0) return Invalid("generation must be positive");
  if (spec.ttl_ms < limits.min_ttl_ms || spec.ttl_ms > limits.max_ttl_ms) {
    return Invalid("ttl_ms must be in " + std::to_string(limits.min_ttl_ms) + ".." +
                   std::to_string(limits.max_ttl_ms));
  }
  if (spec.weight > limits.max_weight) {
    return Invalid("weight must be at most " + std::to_string(limits.max_weight));
  }
  if (spec.zone.size() > limits.max_zone || !IsPlainText(spec.zone)) {
    return Invalid("zone must be at most " + std::to_string(limits.max_zone) +
                   " printable characters without spaces");
  }
  if (spec.version.size() > limits.max_version || !IsPlainText(spec.version)) {
    return Invalid("version must be at most " + std::to_string(limits.max_version) +
                   " printable characters without spaces");
  }
  if (spec.labels.size() > limits.max_labels) {
    return Invalid("at most " + std::to_string(limits.max_labels) + " labels");
  }
  for (const auto& [key, value] : spec.labels) {
    if (key.empty() || key.size() > limits.max_label_key || !IsPlainText(key)) {
      return Invalid("label keys must be 1.." + std::to_string(limits.max_label_key) +
                     " printable characters without spaces");
    }
    if (value.size() > limits.max_label_value || !IsPlainText(value)) {
      return Invalid("label '" + key + "' value must be at most " +
                     std::to_string(limits.max_label_value) + " printable characters");
    }
  }
  return Status::Ok();
}

}  // namespace drover::registry
