// What `drover deploy` is asked to do: a new version of a service (its command, environment and
// instance count), the health gate's timing, and where the agent and the registry are -- from
// the command line, or from a YAML file (`--spec`, read as common/config_file.h says: keys are
// the long flags with '_', and flags given on the command line win; `service` and `command` are
// taken from the file only when the command line has none).
#pragma once

#include <string>
#include <vector>

#include "common/config_file.h"
#include "rollout/deployer.h"

namespace drover::rollout {

struct DeployRequest {
  std::string service;
  std::string version;
  std::vector<std::string> command;
  std::vector<std::string> env;  // KEY=VALUE
  int instances = 1;
  // The hosts: agents by URL (default http://127.0.0.1:7080), or the agents registered in the
  // registry whose labels match `agents` ("all", "zone=eu-1,...").
  std::vector<std::string> agent;
  std::string agents;
  std::string agent_ca;  // CA for an https:// agent (default: the system's)
  std::string max_surge = "25%";
  std::string max_unavailable = "0";
  std::string canary;  // "" : no canary batch
  int canary_pause_ms = 0;
  int drain_delay_ms = 2'000;
  int host_timeout_ms = 10'000;
  int controller_lease_ms = 10'000;
  std::string registry = "http://127.0.0.1:7070";
  std::string registry_ca;
  int min_healthy_ms = 10'000;
  int check_delay_ms = 5'000;
  int progress_deadline_ms = 120'000;
  int stop_grace_ms = 15'000;
};

// Fills `request` from a deploy spec file's text: `command` is a list, `env` a mapping, `agent`
// one URL or a list; `source` (the file name) prefixes every error.
Status ApplyDeploySpec(const std::string& yaml, const std::string& source, const FlagGiven& given,
                       DeployRequest& request);

// The deploy the request describes; INVALID_ARGUMENT naming what is missing or wrong.
Result<DeploySpec> DeploySpecOf(const DeployRequest& request);

}  // namespace drover::rollout
