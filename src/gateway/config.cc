#include "gateway/config.h"

#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/host_port.h"
#include "sdk/registry_channel.h"

namespace drover::gateway {
namespace {

using std::chrono::milliseconds;

// An address to listen on: "ip:port" (port 0: any free port).
bool ValidAddress(const std::string& address) {
  return ParseHostPort(address, "address", {.allow_port_zero = true, .require_ip = true}).ok();
}

// Reads typed values from a YAML map, refusing unknown keys; every error names its path.
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string path) : node_(node), path_(std::move(path)) {}

  Status Check() const {
    if (!node_.IsMap()) return InvalidArgumentError(path_ + ": must be a map");
    return Status::Ok();
  }
  template <typename T>
  Status Get(const char* key, T& out) {
    seen_.insert(key);
    const YAML::Node value = node_[key];
    if (!value) return Status::Ok();
    try {
      out = value.as<T>();
    } catch (const YAML::Exception&) {
      return InvalidArgumentError(Path(key) + ": wrong type");
    }
    return Status::Ok();
  }
  Status GetMs(const char* key, Duration& out, std::int64_t min, std::int64_t max) {
    std::int64_t ms = std::chrono::duration_cast<milliseconds>(out).count();
    if (Status s = Get(key, ms); !s.ok()) return s;
    if (ms < min || ms > max) {
      return InvalidArgumentError(Path(key) + ": must be within " + std::to_string(min) + ".." +
                                  std::to_string(max) + " ms");
    }
    out = milliseconds(ms);
    return Status::Ok();
  }
  // A string, or a list of strings joined with commas (a list of addresses either way).
  Status GetList(const char* key, std::string& out) {
    const YAML::Node value = node(key);
    if (!value || !value.IsSequence()) return Get(key, out);
    std::string joined;
    for (const YAML::Node& item : value) {
      if (!item.IsScalar()) return InvalidArgumentError(Path(key) + ": wrong type");
      joined += (joined.empty() ? "" : ",") + item.as<std::string>();
    }
    out = joined;
    return Status::Ok();
  }
  Status NoUnknownKeys() const {
    for (const auto& kv : node_) {
      const std::string key = kv.first.as<std::string>();
      if (!seen_.contains(key)) return InvalidArgumentError(Path(key.c_str()) + ": unknown key");
    }
    return Status::Ok();
  }
  std::string Path(const char* key) const { return path_ + "." + key; }
  YAML::Node node(const char* key) {
    seen_.insert(key);
    return node_[key];
  }

 private:
  const YAML::Node& node_;
  std::string path_;
  std::set<std::string> seen_;
};

#define DROVER_CONFIG_TRY(expr)                  \
  do {                                           \
    if (Status s_ = (expr); !s_.ok()) return s_; \
  } while (false)

Status ParsePolicy(const MapReader& r, const std::string& policy, const std::string& hash,
                   bool allow_least_conn, Policy& out_policy, HashKind& out_hash) {
  if (policy == "p2c") {
    out_policy = Policy::kP2c;
  } else if (policy == "hash") {
    out_policy = Policy::kHash;
  } else if (policy == "least_conn" && allow_least_conn) {
    out_policy = Policy::kLeastConn;
  } else {
    return InvalidArgumentError(r.Path("policy") + ": must be p2c, hash" +
                                (allow_least_conn ? " or least_conn" : ""));
  }
  if (hash == "maglev") {
    out_hash = HashKind::kMaglev;
  } else if (hash == "ring") {
    out_hash = HashKind::kRing;
  } else {
    return InvalidArgumentError(r.Path("hash") + ": must be maglev or ring");
  }
  return Status::Ok();
}

Result<RouteConfig> ParseRoute(const YAML::Node& node, const std::string& path) {
  MapReader r(node, path);
  DROVER_CONFIG_TRY(r.Check());
  RouteConfig route;
  std::string policy = "p2c", hash = "maglev";
  DROVER_CONFIG_TRY(r.Get("prefix", route.prefix));
  DROVER_CONFIG_TRY(r.Get("service", route.service));
  DROVER_CONFIG_TRY(r.Get("policy", policy));
  DROVER_CONFIG_TRY(r.Get("hash", hash));
  DROVER_CONFIG_TRY(r.Get("hash_header", route.hash_header));
  DROVER_CONFIG_TRY(r.GetMs("response_timeout_ms", route.response_timeout, 1, 86'400'000));
  DROVER_CONFIG_TRY(r.Get("retries", route.retries));
  DROVER_CONFIG_TRY(r.NoUnknownKeys());
  DROVER_CONFIG_TRY(ParsePolicy(r, policy, hash, false, route.policy, route.hash));
  return route;
}

Result<ListenerConfig> ParseListener(const YAML::Node& node, const std::string& path) {
  MapReader r(node, path);
  DROVER_CONFIG_TRY(r.Check());
  ListenerConfig l;
  std::string protocol = "tcp", policy = "p2c", hash = "maglev";
  DROVER_CONFIG_TRY(r.Get("name", l.name));
  DROVER_CONFIG_TRY(r.Get("protocol", protocol));
  DROVER_CONFIG_TRY(r.Get("address", l.address));
  DROVER_CONFIG_TRY(r.Get("service", l.service));
  DROVER_CONFIG_TRY(r.Get("policy", policy));
  DROVER_CONFIG_TRY(r.GetMs("slow_start_ms", l.slow_start, 0, 3'600'000));
  DROVER_CONFIG_TRY(r.Get("slow_start_min_percent", l.slow_start_min_percent));
  DROVER_CONFIG_TRY(r.Get("hash", hash));
  DROVER_CONFIG_TRY(r.Get("bounded_load", l.bounded_load));
  DROVER_CONFIG_TRY(r.Get("hot_key_fraction", l.hot_key_fraction));
  DROVER_CONFIG_TRY(r.Get("hot_key_owners", l.hot_key_owners));
  DROVER_CONFIG_TRY(r.Get("migration_steps", l.migration_steps));
  DROVER_CONFIG_TRY(r.GetMs("migration_step_ms", l.migration_step, 1, 3'600'000));
  DROVER_CONFIG_TRY(r.GetMs("connect_timeout_ms", l.connect_timeout, 1, 600'000));
  DROVER_CONFIG_TRY(r.Get("connect_attempts", l.connect_attempts));
  DROVER_CONFIG_TRY(r.GetMs("idle_timeout_ms", l.idle_timeout, 1, 86'400'000));
  DROVER_CONFIG_TRY(r.GetMs("response_timeout_ms", l.response_timeout, 0, 86'400'000));
  DROVER_CONFIG_TRY(r.GetMs("key_timeout_ms", l.key_timeout, 1, 600'000));
  DROVER_CONFIG_TRY(r.GetMs("health_check_interval_ms", l.health_check_interval, 0, 3'600'000));
  DROVER_CONFIG_TRY(r.GetMs("health_check_timeout_ms", l.health_check_timeout, 1, 600'000));
  DROVER_CONFIG_TRY(r.Get("unhealthy_threshold", l.unhealthy_threshold));
  DROVER_CONFIG_TRY(r.Get("healthy_threshold", l.healthy_threshold));
  DROVER_CONFIG_TRY(r.Get("eject_after_failures", l.eject_after_failures));
  DROVER_CONFIG_TRY(r.GetMs("ejection_ms", l.ejection, 1, 86'400'000));
  DROVER_CONFIG_TRY(r.GetMs("max_ejection_ms", l.max_ejection, 1, 86'400'000));
  DROVER_CONFIG_TRY(r.Get("max_ejected_percent", l.max_ejected_percent));
  DROVER_CONFIG_TRY(r.GetMs("upstream_max_age_ms", l.upstream_max_age, 0, 86'400'000));
  DROVER_CONFIG_TRY(r.GetMs("upstream_idle_timeout_ms", l.upstream_idle_timeout, 1, 86'400'000));
  DROVER_CONFIG_TRY(r.Get("max_idle_per_instance", l.max_idle_per_instance));
  DROVER_CONFIG_TRY(r.Get("retry_budget_percent", l.retry_budget_percent));
  DROVER_CONFIG_TRY(r.Get("retry_budget_min", l.retry_budget_min));
  DROVER_CONFIG_TRY(r.Get("max_header_bytes", l.max_header_bytes));
  DROVER_CONFIG_TRY(r.Get("max_connections", l.max_connections));
  const YAML::Node routes = r.node("routes");
  DROVER_CONFIG_TRY(r.NoUnknownKeys());
  if (protocol == "tcp") {
    l.protocol = Protocol::kTcp;
  } else if (protocol == "http") {
    l.protocol = Protocol::kHttp;
  } else {
    return InvalidArgumentError(r.Path("protocol") + ": must be tcp or http, got '" + protocol +
                                "'");
  }
  DROVER_CONFIG_TRY(ParsePolicy(r, policy, hash, true, l.policy, l.hash));
  if (routes && !routes.IsSequence())
    return InvalidArgumentError(r.Path("routes") + ": must be a list");
  for (std::size_t i = 0; routes && i < routes.size(); ++i) {
    auto route = ParseRoute(routes[i], r.Path("routes") + "[" + std::to_string(i) + "]");
    if (!route.ok()) return route.status();
    l.routes.push_back(std::move(*route));
  }
  return l;
}

Status ValidateHttp(const ListenerConfig& l, const std::string& path) {
  if (!l.service.empty()) {
    return InvalidArgumentError(path + ".service: an http listener routes by routes[].service");
  }
  if (l.routes.empty()) return InvalidArgumentError(path + ".routes: at least one is required");
  std::set<std::string> prefixes;
  for (std::size_t k = 0; k < l.routes.size(); ++k) {
    const RouteConfig& r = l.routes[k];
    const std::string rp = path + ".routes[" + std::to_string(k) + "]";
    if (r.prefix.empty() || r.prefix[0] != '/') {
      return InvalidArgumentError(rp + ".prefix: must start with '/', got '" + r.prefix + "'");
    }
    if (!prefixes.insert(r.prefix).second) {
      return InvalidArgumentError(rp + ".prefix: '" + r.prefix + "' is used twice");
    }
    if (r.service.empty()) return InvalidArgumentError(rp + ".service: required");
    if (r.policy == Policy::kLeastConn) return InvalidArgumentError(rp + ".policy: p2c or hash");
    if (r.policy == Policy::kHash && r.hash_header.empty()) {
      return InvalidArgumentError(rp + ".hash_header: required for policy hash");
    }
    if (r.retries < 0 || r.retries > 9) {
      return InvalidArgumentError(rp + ".retries: must be within 0..9");
    }
  }
  if (l.max_idle_per_instance < 0 || l.max_idle_per_instance > 10'000) {
    return InvalidArgumentError(path + ".max_idle_per_instance: must be within 0..10000");
  }
  if (!(l.retry_budget_percent >= 0 && l.retry_budget_percent <= 100)) {
    return InvalidArgumentError(path + ".retry_budget_percent: must be within 0..100");
  }
  if (l.retry_budget_min < 0) return InvalidArgumentError(path + ".retry_budget_min: must be >= 0");
  if (l.max_header_bytes < 1024 || l.max_header_bytes > 1024 * 1024) {
    return InvalidArgumentError(path + ".max_header_bytes: must be within 1024..1048576");
  }
  if (l.max_connections < 1 || l.max_connections > 10'000'000) {
    return InvalidArgumentError(path + ".max_connections: must be within 1..10000000");
  }
  return Status::Ok();
}

}  // namespace

std::string_view ProtocolName(Protocol protocol) {
  return protocol == Protocol::kHttp ? "http" : "tcp";
}

ListenerConfig RouteUpstreamConfig(const ListenerConfig& listener, const RouteConfig& route) {
  ListenerConfig c = listener;
  c.service = route.service;
  c.policy = route.policy;
  c.hash = route.hash;
  c.response_timeout = route.response_timeout;
  c.connect_attempts = 1 + route.retries;
  c.routes.clear();
  return c;
}

std::string_view PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kP2c:
      return "p2c";
    case Policy::kHash:
      return "hash";
    case Policy::kLeastConn:
      return "least_conn";
  }
  return "?";
}

Status ValidateGatewayConfig(const GatewayConfig& c) {
  if (c.registry.empty())
    return InvalidArgumentError("registry: required (gRPC host:port, or several comma-separated)");
  if (auto target = sdk::ParseRegistryTarget(c.registry, c.registry_ca); !target.ok()) {
    return target.status();
  }
  if (c.threads < 0 || c.threads > 256) return InvalidArgumentError("threads: must be 0..256");
  if (c.cpu_affinity != "spread" && c.cpu_affinity != "none") {
    return InvalidArgumentError("cpu_affinity: must be spread or none, got '" + c.cpu_affinity +
                                "'");
  }
  if (!c.advertise.empty()) {
    const auto a = ParseHostPort(c.advertise, "advertise");
    if (!a.ok()) return a.status();
    if (a->IsWildcard() || a->port == 0) {
      return InvalidArgumentError("advertise: give the admin address others reach, got '" +
                                  c.advertise + "'");
    }
  }
  if (!c.admin.empty() && !ValidAddress(c.admin)) {
    return InvalidArgumentError("admin: must be IPv4 host:port, got '" + c.admin + "'");
  }
  if (c.drain < Duration::zero()) return InvalidArgumentError("drain_ms: cannot be negative");
  // The registry confirms an idle table every 5 s (PROGRESS): a shorter limit would call a
  // healthy registry stale between two of them.
  if (c.max_stale != Duration::zero() && c.max_stale < std::chrono::seconds(10)) {
    return InvalidArgumentError("max_stale_ms: must be 0 (never stale) or at least 10000");
  }
  if (c.listeners.empty()) return InvalidArgumentError("listeners: at least one is required");
  std::set<std::string> names;
  for (std::size_t i = 0; i < c.listeners.size(); ++i) {
    const ListenerConfig& l = c.listeners[i];
    const std::string path = "listeners[" + std::to_string(i) + "]";
    if (l.name.empty()) return InvalidArgumentError(path + ".name: required");
    if (!names.insert(l.name).second) {
      return InvalidArgumentError(path + ".name: '" + l.name + "' is used twice");
    }
    if (!ValidAddress(l.address)) {
      return InvalidArgumentError(path + ".address: must be IPv4 host:port, got '" + l.address +
                                  "'");
    }
    if (l.protocol == Protocol::kTcp) {
      if (l.service.empty()) return InvalidArgumentError(path + ".service: required");
      if (!l.routes.empty()) {
        return InvalidArgumentError(path + ".routes: only for protocol http");
      }
    } else if (Status s = ValidateHttp(l, path); !s.ok()) {
      return s;
    }
    if (!(l.slow_start_min_percent >= 1 && l.slow_start_min_percent <= 100)) {
      return InvalidArgumentError(path + ".slow_start_min_percent: must be within 1..100");
    }
    if (!(l.hot_key_fraction >= 0 && l.hot_key_fraction < 1)) {
      return InvalidArgumentError(path + ".hot_key_fraction: must be within [0, 1)");
    }
    if (l.hot_key_owners < 1 || l.hot_key_owners > 16) {
      return InvalidArgumentError(path + ".hot_key_owners: must be within 1..16");
    }
    if (l.migration_steps < 1 || l.migration_steps > 100) {
      return InvalidArgumentError(path + ".migration_steps: must be within 1..100");
    }
    if (!(l.bounded_load >= 1 && std::isfinite(l.bounded_load))) {
      return InvalidArgumentError(path + ".bounded_load: must be a finite number >= 1");
    }
    if (l.health_check_interval > Duration::zero() &&
        l.health_check_timeout >= l.health_check_interval) {
      return InvalidArgumentError(path +
                                  ".health_check_timeout_ms: must be below the check interval");
    }
    if (l.unhealthy_threshold < 1 || l.healthy_threshold < 1 || l.eject_after_failures < 1) {
      return InvalidArgumentError(
          path + ": unhealthy_threshold, healthy_threshold and eject_after_failures must be >= 1");
    }
    if (l.ejection > l.max_ejection) {
      return InvalidArgumentError(path + ".ejection_ms: must not exceed max_ejection_ms");
    }
    if (!(l.max_ejected_percent >= 0 && l.max_ejected_percent <= 100)) {
      return InvalidArgumentError(path + ".max_ejected_percent: must be within 0..100");
    }
    if (l.connect_attempts < 1 || l.connect_attempts > 10) {
      return InvalidArgumentError(path + ".connect_attempts: must be within 1..10");
    }
  }
  return Status::Ok();
}

Result<GatewayConfig> ParseGatewayConfig(const std::string& yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string("not valid YAML: ") + e.what());
  }
  GatewayConfig c;
  try {
    MapReader r(root, "config");
    DROVER_CONFIG_TRY(r.Check());
    DROVER_CONFIG_TRY(r.GetList("registry", c.registry));
    DROVER_CONFIG_TRY(r.Get("registry_ca", c.registry_ca));
    DROVER_CONFIG_TRY(r.Get("token", c.token));
    DROVER_CONFIG_TRY(r.Get("threads", c.threads));
    DROVER_CONFIG_TRY(r.Get("cpu_affinity", c.cpu_affinity));
    DROVER_CONFIG_TRY(r.Get("admin", c.admin));
    DROVER_CONFIG_TRY(r.Get("register", c.register_self));
    DROVER_CONFIG_TRY(r.Get("name", c.name));
    DROVER_CONFIG_TRY(r.Get("advertise", c.advertise));
    DROVER_CONFIG_TRY(r.GetMs("drain_ms", c.drain, 0, 3'600'000));
    DROVER_CONFIG_TRY(r.GetMs("max_stale_ms", c.max_stale, 0, 86'400'000));
    const YAML::Node listeners = r.node("listeners");
    DROVER_CONFIG_TRY(r.NoUnknownKeys());
    if (listeners && !listeners.IsSequence()) {
      return InvalidArgumentError("listeners: must be a list");
    }
    for (std::size_t i = 0; listeners && i < listeners.size(); ++i) {
      auto l = ParseListener(listeners[i], "listeners[" + std::to_string(i) + "]");
      if (!l.ok()) return l.status();
      c.listeners.push_back(std::move(*l));
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string("config: ") + e.what());
  }
  DROVER_CONFIG_TRY(ValidateGatewayConfig(c));
  return c;
}

Result<GatewayConfig> LoadGatewayConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgumentError("cannot read config file " + path);
  std::ostringstream text;
  text << in.rdbuf();
  auto config = ParseGatewayConfig(text.str());
  if (!config.ok()) return config.status().WithContext(path);
  return config;
}

}  // namespace drover::gateway
