#include "rollout/platform.h"

#include <array>

namespace drover::rollout {
namespace {

constexpr std::array<std::string_view, 4> kEventNames = {"started", "crashed", "gave_up",
                                                         "stopped"};
constexpr std::array<std::string_view, 4> kStatusNames = {"STARTING", "RUNNING", "GAVE_UP",
                                                          "STOPPING"};

}  // namespace

Status ValidateName(std::string_view what, std::string_view name) {
  if (name.empty() || name.size() > 128) {
    return InvalidArgumentError(std::string(what) + " must be 1..128 characters");
  }
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return InvalidArgumentError(std::string(what) + " '" + std::string(name) +
                                  "' may only use [A-Za-z0-9._-]");
    }
  }
  if (name.front() == '.' || name.front() == '-') {
    return InvalidArgumentError(std::string(what) + " may not start with '.' or '-'");
  }
  return Status::Ok();
}

namespace {}  // namespace

std::string_view EventKindName(EventKind kind) {
  return kEventNames[static_cast<std::size_t>(kind)];
}

Result<EventKind> ParseEventKind(std::string_view name) {
  for (std::size_t i = 0; i < kEventNames.size(); ++i) {
    if (kEventNames[i] == name) return static_cast<EventKind>(i);
  }
  return InvalidArgumentError("unknown event kind '" + std::string(name) + "'");
}

std::string_view InstanceStatusName(InstanceStatus status) {
  return kStatusNames[static_cast<std::size_t>(status)];
}

Result<InstanceStatus> ParseInstanceStatus(std::string_view name) {
  for (std::size_t i = 0; i < kStatusNames.size(); ++i) {
    if (kStatusNames[i] == name) return static_cast<InstanceStatus>(i);
  }
  return InvalidArgumentError("unknown instance status '" + std::string(name) + "'");
}

Status ValidateLaunchSpec(const LaunchSpec& spec) {
  DROVER_RETURN_IF_ERROR(ValidateName("service", spec.service));
  DROVER_RETURN_IF_ERROR(ValidateName("instance id", spec.id));
  if (!spec.version.empty()) DROVER_RETURN_IF_ERROR(ValidateName("version", spec.version));
  if (spec.argv.empty() || spec.argv.front().empty()) {
    return InvalidArgumentError("instance " + spec.id + ": no command to run");
  }
  for (const auto& [key, value] : spec.env) {
    if (key.empty() || key.find('=') != std::string::npos || key.find('\0') != std::string::npos) {
      return InvalidArgumentError("instance " + spec.id + ": bad environment variable name");
    }
  }
  return Status::Ok();
}

}  // namespace drover::rollout
