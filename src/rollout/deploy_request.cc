#include "rollout/deploy_request.h"

namespace drover::rollout {

Status ApplyDeploySpec(const std::string& yaml, const std::string& source, const FlagGiven& given,
                       DeployRequest& args) {
  DROVER_ASSIGN_OR_RETURN(const YAML::Node root, LoadYamlMapping(yaml, source));
  std::string key;
  try {
    for (const auto& kv : root) {
      key.clear();
      key = kv.first.as<std::string>();
      const bool keep = given(FlagOfKey(key));
      const YAML::Node& v = kv.second;
      if (key == "service") {
        if (args.service.empty()) args.service = v.as<std::string>();
      } else if (key == "version") {
        if (!keep) args.version = v.as<std::string>();
      } else if (key == "command") {
        if (args.command.empty()) args.command = v.as<std::vector<std::string>>();
      } else if (key == "env") {
        if (!v.IsMap()) return InvalidArgumentError(source + ": env must be a mapping");
        if (!keep) {
          for (const auto& e : v) {
            args.env.push_back(e.first.as<std::string>() + "=" + e.second.as<std::string>());
          }
        }
      } else if (key == "instances") {
        if (!keep) args.instances = v.as<int>();
      } else if (key == "agent") {
        if (!keep) args.agent = StringOrList(v);
      } else if (key == "agents") {
        if (!keep) args.agents = v.as<std::string>();
      } else if (key == "max_surge") {
        if (!keep) args.max_surge = v.as<std::string>();
      } else if (key == "max_unavailable") {
        if (!keep) args.max_unavailable = v.as<std::string>();
      } else if (key == "canary") {
        if (!keep) args.canary = v.as<std::string>();
      } else if (key == "canary_pause_ms") {
        if (!keep) args.canary_pause_ms = v.as<int>();
      } else if (key == "drain_delay_ms") {
        if (!keep) args.drain_delay_ms = v.as<int>();
      } else if (key == "host_timeout_ms") {
        if (!keep) args.host_timeout_ms = v.as<int>();
      } else if (key == "controller_lease_ms") {
        if (!keep) args.controller_lease_ms = v.as<int>();
      } else if (key == "agent_ca") {
        if (!keep) args.agent_ca = v.as<std::string>();
      } else if (key == "registry") {
        if (!keep) args.registry = v.as<std::string>();
      } else if (key == "registry_ca") {
        if (!keep) args.registry_ca = v.as<std::string>();
      } else if (key == "min_healthy_ms") {
        if (!keep) args.min_healthy_ms = v.as<int>();
      } else if (key == "check_delay_ms") {
        if (!keep) args.check_delay_ms = v.as<int>();
      } else if (key == "progress_deadline_ms") {
        if (!keep) args.progress_deadline_ms = v.as<int>();
      } else if (key == "stop_grace_ms") {
        if (!keep) args.stop_grace_ms = v.as<int>();
      } else {
        return InvalidArgumentError(source + ": unknown key '" + key + "'");
      }
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(
        source + ": " +
        (key.empty() ? "a key is not a string" : "bad value for '" + key + "': " + e.what()));
  }
  return Status::Ok();
}

Result<DeploySpec> DeploySpecOf(const DeployRequest& request) {
  if (request.service.empty()) {
    return InvalidArgumentError("which service? (SERVICE or `service:` in --spec)");
  }
  if (request.version.empty()) return InvalidArgumentError("--version is required");
  if (request.command.empty()) {
    return InvalidArgumentError("no command: give it after -- or as `command:` in --spec");
  }
  DeploySpec spec;
  spec.service = request.service;
  spec.version = request.version;
  spec.argv = request.command;
  for (const std::string& e : request.env) {
    const auto eq = e.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgumentError("--env wants KEY=VALUE, got '" + e + "'");
    }
    spec.env[e.substr(0, eq)] = e.substr(eq + 1);
  }
  spec.instances = request.instances;
  DROVER_ASSIGN_OR_RETURN(spec.max_surge, ParseAmount(request.max_surge, "--max-surge"));
  DROVER_ASSIGN_OR_RETURN(spec.max_unavailable,
                          ParseAmount(request.max_unavailable, "--max-unavailable"));
  if (!request.canary.empty()) {
    DROVER_ASSIGN_OR_RETURN(spec.canary, ParseAmount(request.canary, "--canary"));
  }
  if (!request.agents.empty() && !request.agent.empty()) {
    return InvalidArgumentError("give --agent URLs or an --agents selector, not both");
  }
  spec.canary_pause = std::chrono::milliseconds(request.canary_pause_ms);
  spec.drain_delay = std::chrono::milliseconds(request.drain_delay_ms);
  spec.host_timeout = std::chrono::milliseconds(request.host_timeout_ms);
  spec.controller_lease = std::chrono::milliseconds(request.controller_lease_ms);
  spec.gate.min_healthy = std::chrono::milliseconds(request.min_healthy_ms);
  spec.gate.check_delay = std::chrono::milliseconds(request.check_delay_ms);
  spec.gate.progress_deadline = std::chrono::milliseconds(request.progress_deadline_ms);
  spec.stop_grace = std::chrono::milliseconds(request.stop_grace_ms);
  // As the deployer will check it: bad usage, told before anything runs.
  DROVER_RETURN_IF_ERROR(ValidateDeploySpec(spec));
  return spec;
}

}  // namespace drover::rollout
