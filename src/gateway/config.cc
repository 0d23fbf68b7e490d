#include "gateway/config.h"

#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace drover::gateway {
namespace {

using std::chrono::milliseconds;

bool ValidAddress(const std::string& address) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  int port = -1;
  const char* begin = address.data() + colon + 1;
  const char* end = address.data() + address.size();
  const auto [ptr, ec] = std::from_chars(begin, end, port);
  if (ec != std::errc() || ptr != end || port < 0 || port > 65535) return false;
  in_addr ip{};
  return ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &ip) == 1;
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
  DROVER_CONFIG_TRY(r.NoUnknownKeys());
  if (protocol != "tcp") {
    return InvalidArgumentError(r.Path("protocol") + ": '" + protocol + "' is not supported (tcp)");
  }
  if (policy == "p2c") {
    l.policy = Policy::kP2c;
  } else if (policy == "hash") {
    l.policy = Policy::kHash;
  } else if (policy == "least_conn") {
    l.policy = Policy::kLeastConn;
  } else {
    return InvalidArgumentError(r.Path("policy") + ": must be p2c, hash or least_conn");
  }
  if (hash == "maglev") {
    l.hash = HashKind::kMaglev;
  } else if (hash == "ring") {
    l.hash = HashKind::kRing;
  } else {
    return InvalidArgumentError(r.Path("hash") + ": must be maglev or ring");
  }
  return l;
}

}  // namespace

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
  if (c.registry.empty()) return InvalidArgumentError("registry: required (gRPC host:port)");
  if (c.threads < 0 || c.threads > 256) return InvalidArgumentError("threads: must be 0..256");
  if (!c.admin.empty() && !ValidAddress(c.admin)) {
    return InvalidArgumentError("admin: must be IPv4 host:port, got '" + c.admin + "'");
  }
  if (c.drain < Duration::zero()) return InvalidArgumentError("drain_ms: cannot be negative");
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
    if (l.service.empty()) return InvalidArgumentError(path + ".service: required");
    if (!(l.slow_start_min_percent >= 1 && l.slow_start_min_percent <= 100)) {
      return InvalidArgumentError(path + ".slow_start_min_percent: must be within 1..100");
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
    DROVER_CONFIG_TRY(r.Get("registry", c.registry));
    DROVER_CONFIG_TRY(r.Get("token", c.token));
    DROVER_CONFIG_TRY(r.Get("threads", c.threads));
    DROVER_CONFIG_TRY(r.Get("admin", c.admin));
    DROVER_CONFIG_TRY(r.GetMs("drain_ms", c.drain, 0, 3'600'000));
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
