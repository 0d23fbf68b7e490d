#include "config_files.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "registry/ui_url.h"

namespace drover::cli {
namespace {

// A YAML sequence of strings, or one string as a list of one; throws YAML::Exception otherwise.
std::vector<std::string> StringOrList(const YAML::Node& node) {
  if (node.IsSequence()) return node.as<std::vector<std::string>>();
  return {node.as<std::string>()};
}

// The mapping at the top of `yaml`, or INVALID_ARGUMENT.
Result<YAML::Node> LoadMapping(const std::string& yaml, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(source + ": not valid YAML: " + e.what());
  }
  if (!root.IsMap()) return InvalidArgumentError(source + ": expected a mapping");
  return root;
}

// "tick_ms" -> "--tick-ms".
std::string FlagOf(const std::string& key) {
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

}  // namespace

Result<std::string> ReadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgumentError("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Status ApplyRegistryConfig(const std::string& yaml, const std::string& source,
                           const FlagGiven& given, RegistryArgs& args) {
  DROVER_ASSIGN_OR_RETURN(const YAML::Node root, LoadMapping(yaml, "config " + source));
  const std::string where = "config " + source + ": ";
  std::string key;
  try {
    for (const auto& kv : root) {
      key.clear();
      key = kv.first.as<std::string>();
      std::string flag = FlagOf(key);
      if (key == "ui_gateways" || key == "ui_agents") flag.pop_back();  // the flags are singular
      const bool keep = given(flag);                                    // the command line wins
      const YAML::Node& v = kv.second;
      if (key == "store") {
        if (!keep) args.store = v.as<std::string>();
      } else if (key == "data_dir") {
        if (!keep) args.data_dir = v.as<std::string>();
      } else if (key == "etcd_endpoints") {
        if (!keep) args.etcd_endpoints = v.as<std::string>();
      } else if (key == "etcd_prefix") {
        if (!keep) args.etcd_prefix = v.as<std::string>();
      } else if (key == "etcd_session_ttl") {
        if (!keep) args.etcd_session_ttl_s = v.as<int>();
      } else if (key == "http") {
        if (!keep) args.http = v.as<std::string>();
      } else if (key == "grpc") {
        if (!keep) args.grpc = v.as<std::string>();
      } else if (key == "auth_tokens") {
        if (!keep) args.auth_tokens = v.as<std::string>();
      } else if (key == "tick_ms") {
        if (!keep) args.tick_ms = v.as<int>();
      } else if (key == "self_preservation") {
        if (!keep) args.self_preservation_fraction = v.as<double>();
      } else if (key == "tls_cert") {
        if (!keep) args.tls_cert = v.as<std::string>();
      } else if (key == "tls_key") {
        if (!keep) args.tls_key = v.as<std::string>();
      } else if (key == "max_connections") {
        if (!keep) args.max_connections = v.as<std::size_t>();
      } else if (key == "max_watches_per_client") {
        if (!keep) args.max_watches_per_client = v.as<std::size_t>();
      } else if (key == "write_rate") {
        if (!keep) args.write_rate = v.as<double>();
      } else if (key == "write_burst") {
        if (!keep) args.write_burst = v.as<double>();
      } else if (key == "max_body") {
        if (!keep) args.max_body = v.as<std::size_t>();
      } else if (key == "ui_gateways") {
        if (!keep) args.ui_gateways = StringOrList(v);
      } else if (key == "ui_agents") {
        if (!keep) args.ui_agents = StringOrList(v);
      } else {
        return InvalidArgumentError(where + "unknown key '" + key + "'");
      }
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(
        where + (key.empty() ? "a key is not a string" : "bad value for '" + key + "'"));
  }
  if (args.store != "sqlite" && args.store != "etcd") {
    return InvalidArgumentError(where + "store must be sqlite or etcd");
  }
  if (args.etcd_session_ttl_s < 1 || args.etcd_session_ttl_s > 600) {
    return InvalidArgumentError(where + "etcd_session_ttl must be 1..600");
  }
  if (args.tick_ms < 10 || args.tick_ms > 60'000) {
    return InvalidArgumentError(where + "tick_ms must be 10..60000");
  }
  if (!(args.self_preservation_fraction >= 0 && args.self_preservation_fraction <= 1)) {
    return InvalidArgumentError(where + "self_preservation must be 0..1");
  }
  if (args.max_connections < 1 || args.max_watches_per_client < 1 || args.max_body < 1024) {
    return InvalidArgumentError(
        where + "max_connections and max_watches_per_client must be >= 1, max_body >= 1024");
  }
  if (!(args.write_rate >= 0 && args.write_burst >= 0)) {
    return InvalidArgumentError(where + "write_rate and write_burst must be >= 0");
  }
  for (const auto* urls : {&args.ui_gateways, &args.ui_agents}) {
    for (const std::string& url : *urls) {
      if (Status s = registry::ValidateUiUrl(url); !s.ok()) {
        return InvalidArgumentError(where + s.message());
      }
    }
  }
  return Status::Ok();
}

Status ApplyDeploySpec(const std::string& yaml, const std::string& source, const FlagGiven& given,
                       DeployArgs& args) {
  DROVER_ASSIGN_OR_RETURN(const YAML::Node root, LoadMapping(yaml, source));
  std::string key;
  try {
    for (const auto& kv : root) {
      key.clear();
      key = kv.first.as<std::string>();
      const bool keep = given(FlagOf(key));
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
        if (!keep) args.agent = v.as<std::string>();
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

}  // namespace drover::cli
