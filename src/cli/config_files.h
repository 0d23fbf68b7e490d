// The YAML files the CLI reads next to its flags: `drover registry --config` and `drover deploy
// --spec`. Parsed by pure functions -- text in, settings out, a Status for anything wrong, never
// an exception -- so that they are fuzzed (tests/fuzz/cli_config_fuzz.cc) apart from the command
// line. Keys are the long flag names with '_' for '-'; a setting whose flag was given on the
// command line keeps the flag's value; an unknown key is an error, not a silent default.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/status.h"

namespace drover::cli {

struct RegistryArgs {
  std::string store = "sqlite";  // sqlite | etcd
  std::string data_dir = "drover-data";
  std::string etcd_endpoints;  // etcd: host:port,host:port,...
  std::string etcd_prefix = "/drover/registry";
  int etcd_session_ttl_s = 5;
  std::string http = "127.0.0.1:7070";
  std::string grpc = "127.0.0.1:7071";  // "off": no gRPC API
  std::string auth_tokens;              // empty: no authentication
  int tick_ms = 500;
  double self_preservation_fraction = 0.5;
  std::string tls_cert;  // both set: HTTPS and gRPC over TLS
  std::string tls_key;
  // Protection (HttpOptions): 0 max-connections/watches would refuse everything, so >= 1.
  std::size_t max_connections = 4096;
  std::size_t max_watches_per_client = 64;
  double write_rate = 0;  // writes/s per client address; 0: no limit
  double write_burst = 0;
  std::size_t max_body = 64 * 1024;
  std::vector<std::string> ui_gateways;  // the dashboard's gateway and agent panels
  std::vector<std::string> ui_agents;
  std::string config;  // YAML file with any of the above; flags given on the command line win
};

// A YAML sequence of strings, or one string as a list of one; throws YAML::Exception otherwise.

struct DeployArgs {
  std::string spec_file;
  std::string service;
  std::string version;
  std::vector<std::string> command;
  std::vector<std::string> env;  // KEY=VALUE
  int instances = 1;
  std::string agent = "http://127.0.0.1:7080";
  std::string registry = "http://127.0.0.1:7070";
  std::string registry_ca;
  int min_healthy_ms = 10'000;
  int check_delay_ms = 5'000;
  int progress_deadline_ms = 120'000;
  int stop_grace_ms = 15'000;
  bool json = false;
};

// Whether a flag ("--tick-ms") was given on the command line.
using FlagGiven = std::function<bool(std::string_view flag)>;

// Fills every setting of `args` whose flag was not given from the registry config `yaml`, and
// checks ranges; `source` (the file name) prefixes every error. The repeatable --ui-gateway and
// --ui-agent are the keys ui_gateways and ui_agents (a list, or one string).
Status ApplyRegistryConfig(const std::string& yaml, const std::string& source,
                           const FlagGiven& given, RegistryArgs& args);

// The same for a deploy spec: `command` is a list, `env` a mapping.
Status ApplyDeploySpec(const std::string& yaml, const std::string& source, const FlagGiven& given,
                       DeployArgs& args);

// The whole file, or INVALID_ARGUMENT naming it.
Result<std::string> ReadConfigFile(const std::string& path);

}  // namespace drover::cli
