#include "registry/daemon_config.h"

#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <tuple>

#include "common/cidr.h"
#include "registry/ui_url.h"

namespace drover::registry {

namespace {

using Setter = void (*)(const YAML::Node&, DaemonOptions&);

// Each key and how its value lands in the options; a value of the wrong type throws.
const std::map<std::string, Setter, std::less<>>& Setters() {
  static const std::map<std::string, Setter, std::less<>> setters = {
      {"store", [](const YAML::Node& v, DaemonOptions& o) { o.store = v.as<std::string>(); }},
      {"data_dir", [](const YAML::Node& v, DaemonOptions& o) { o.data_dir = v.as<std::string>(); }},
      {"etcd_endpoints",
       [](const YAML::Node& v, DaemonOptions& o) { o.etcd_endpoints = v.as<std::string>(); }},
      {"etcd_prefix",
       [](const YAML::Node& v, DaemonOptions& o) { o.etcd_prefix = v.as<std::string>(); }},
      {"etcd_session_ttl",
       [](const YAML::Node& v, DaemonOptions& o) { o.etcd_session_ttl_s = v.as<int>(); }},
      {"http", [](const YAML::Node& v, DaemonOptions& o) { o.http = v.as<std::string>(); }},
      {"grpc", [](const YAML::Node& v, DaemonOptions& o) { o.grpc = v.as<std::string>(); }},
      {"auth_tokens",
       [](const YAML::Node& v, DaemonOptions& o) { o.auth_tokens = v.as<std::string>(); }},
      {"tick_ms", [](const YAML::Node& v, DaemonOptions& o) { o.tick_ms = v.as<int>(); }},
      {"self_preservation",
       [](const YAML::Node& v, DaemonOptions& o) {
         o.self_preservation_fraction = v.as<double>();
       }},
      {"tls_cert", [](const YAML::Node& v, DaemonOptions& o) { o.tls_cert = v.as<std::string>(); }},
      {"tls_key", [](const YAML::Node& v, DaemonOptions& o) { o.tls_key = v.as<std::string>(); }},
      {"max_connections",
       [](const YAML::Node& v, DaemonOptions& o) { o.max_connections = v.as<std::size_t>(); }},
      {"max_watches_per_client",
       [](const YAML::Node& v, DaemonOptions& o) {
         o.max_watches_per_client = v.as<std::size_t>();
       }},
      {"max_watches",
       [](const YAML::Node& v, DaemonOptions& o) { o.max_watches = v.as<std::size_t>(); }},
      {"write_rate", [](const YAML::Node& v, DaemonOptions& o) { o.write_rate = v.as<double>(); }},
      {"total_write_rate",
       [](const YAML::Node& v, DaemonOptions& o) { o.total_write_rate = v.as<double>(); }},
      {"write_burst",
       [](const YAML::Node& v, DaemonOptions& o) { o.write_burst = v.as<double>(); }},
      {"max_body", [](const YAML::Node& v, DaemonOptions& o) { o.max_body = v.as<std::size_t>(); }},
      {"ui_gateways",
       [](const YAML::Node& v, DaemonOptions& o) { o.ui_gateways = StringOrList(v); }},
      {"ui_agents", [](const YAML::Node& v, DaemonOptions& o) { o.ui_agents = StringOrList(v); }},
      {"fleet_ca", [](const YAML::Node& v, DaemonOptions& o) { o.fleet_ca = v.as<std::string>(); }},
      {"dns", [](const YAML::Node& v, DaemonOptions& o) { o.dns = v.as<std::string>(); }},
      {"xds", [](const YAML::Node& v, DaemonOptions& o) { o.xds = v.as<std::string>(); }},
      {"xds_allow",
       [](const YAML::Node& v, DaemonOptions& o) {
         std::string joined;
         for (const std::string& cidr : StringOrList(v))
           joined += (joined.empty() ? "" : ",") + cidr;
         o.xds_allow = joined;
       }},
      {"xds_max_streams_per_client",
       [](const YAML::Node& v, DaemonOptions& o) {
         o.xds_max_streams_per_client = v.as<std::size_t>();
       }},
      {"xds_max_streams",
       [](const YAML::Node& v, DaemonOptions& o) { o.xds_max_streams = v.as<std::size_t>(); }},
      {"dns_domain",
       [](const YAML::Node& v, DaemonOptions& o) { o.dns_domain = v.as<std::string>(); }},
      {"dns_ttl",
       [](const YAML::Node& v, DaemonOptions& o) { o.dns_ttl_s = v.as<std::uint32_t>(); }},
  };
  return setters;
}

// The ranges the flags check, for values that came from the file.
Status CheckRanges(const std::string& where, const DaemonOptions& args) {
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
  // One key per message, with the value it had: never "a, b and c must be ...".
  const auto at_least = [&](const char* key, double value, double min) {
    std::ostringstream text;
    text << where << key << " must be >= " << min << ", got " << value;
    return value >= min ? Status::Ok() : InvalidArgumentError(text.str());
  };
  for (const auto& [key, value, min] :
       std::initializer_list<std::tuple<const char*, double, double>>{
           {"max_connections", static_cast<double>(args.max_connections), 1},
           {"max_watches_per_client", static_cast<double>(args.max_watches_per_client), 1},
           {"max_watches", static_cast<double>(args.max_watches), 1},
           {"max_body", static_cast<double>(args.max_body), 1024},
           {"write_rate", args.write_rate, 0},
           {"write_burst", args.write_burst, 0},
           {"total_write_rate", args.total_write_rate, 0},
           {"xds_max_streams_per_client", static_cast<double>(args.xds_max_streams_per_client), 1},
           {"xds_max_streams", static_cast<double>(args.xds_max_streams), 1}}) {
    DROVER_RETURN_IF_ERROR(at_least(key, value, min));
  }
  if (args.dns_ttl_s > 86'400) return InvalidArgumentError(where + "dns_ttl must be 0..86400");
  if (auto cidrs = ParseCidrList(args.xds_allow, "xds_allow"); !cidrs.ok()) {
    return InvalidArgumentError(where + cidrs.status().message());
  }
  for (const auto* urls : {&args.ui_gateways, &args.ui_agents}) {
    for (const std::string& url : *urls) {
      if (Status s = ValidateUiUrl(url); !s.ok()) {
        return InvalidArgumentError(where + s.message());
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status ApplyDaemonConfig(const std::string& yaml, const std::string& source, const FlagGiven& given,
                         DaemonOptions& options) {
  DROVER_ASSIGN_OR_RETURN(const YAML::Node root, LoadYamlMapping(yaml, "config " + source));
  const std::string where = "config " + source + ": ";
  std::string key;
  try {
    for (const auto& kv : root) {
      key.clear();
      key = kv.first.as<std::string>();
      const auto setter = Setters().find(key);
      if (setter == Setters().end())
        return InvalidArgumentError(where + "unknown key '" + key + "'");
      std::string flag = FlagOfKey(key);
      if (key == "ui_gateways" || key == "ui_agents") flag.pop_back();  // the flags are singular
      if (!given(flag)) setter->second(kv.second, options);             // the command line wins
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(
        where + (key.empty() ? "a key is not a string" : "bad value for '" + key + "'"));
  }
  return CheckRanges(where, options);
}

}  // namespace drover::registry
