#include "rollout/agent_client.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/http_error.h"
#include "drover/discovery.h"
#include "rollout/json_codec.h"

namespace drover::rollout {

using json = nlohmann::json;

Status AgentClient::Start(const LaunchSpec& spec) {
  return Call("POST", "/v1/instances", LaunchSpecToJson(spec).dump()).status();
}

Status AgentClient::Stop(const std::string& id, Duration grace) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(grace).count();
  return Call("DELETE", "/v1/instances/" + id + "?grace_ms=" + std::to_string(ms)).status();
}

Result<std::vector<InstanceInfo>> AgentClient::List(const std::string& service) {
  DROVER_ASSIGN_OR_RETURN(json body, Call("GET", "/v1/instances?service=" + service));
  std::vector<InstanceInfo> out;
  for (const json& i : body.at("instances")) {
    DROVER_ASSIGN_OR_RETURN(InstanceInfo info, InstanceInfoFromJson(i));
    out.push_back(std::move(info));
  }
  return out;
}

Status AgentClient::Record(const std::string& id, const json& record) {
  return Call("PUT", "/v1/deploys/" + id, record.dump()).status();
}

Result<json> AgentClient::Call(std::string_view method, const std::string& target,
                               const std::string& body) {
  DROVER_ASSIGN_OR_RETURN(net::HttpResult reply, client_.Send(method, target, body));
  json parsed = json::parse(reply.body, nullptr, false);
  if (reply.status != 200) return StatusOfErrorReply(reply.status, reply.body, "agent");
  if (parsed.is_discarded()) return UnavailableError("agent sent a reply that is not JSON");
  return parsed;
}

Result<json> RegistryInstances(const net::HttpClient& registry, const std::string& service) {
  DROVER_ASSIGN_OR_RETURN(net::HttpResult reply,
                          registry.Send("GET", "/v1/services/" + service + "/instances"));
  if (reply.status != 200) return StatusOfErrorReply(reply.status, reply.body, "registry");
  json body = json::parse(reply.body, nullptr, false);
  if (body.is_discarded() || !body.contains("instances") || !body["instances"].is_array()) {
    return UnavailableError("registry sent a reply that is not a list");
  }
  return std::move(body["instances"]);
}

Result<std::map<std::string, bool>> RegistryReadiness(const net::HttpClient& registry,
                                                      const std::string& service) {
  DROVER_ASSIGN_OR_RETURN(const json instances, RegistryInstances(registry, service));
  std::map<std::string, bool> out;
  for (const json& in : instances) {
    out[in.value("id", "")] = in.value("state", "") == "READY" && in.value("accepting", false);
  }
  return out;
}

Result<bool> RegistryForget(const net::HttpClient& registry, const std::string& service,
                            const std::string& id) {
  DROVER_ASSIGN_OR_RETURN(const json instances, RegistryInstances(registry, service));
  for (const json& in : instances) {
    if (in.value("id", "") != id) continue;
    const std::uint64_t generation = in.value("generation", std::uint64_t{0});
    DROVER_ASSIGN_OR_RETURN(
        net::HttpResult reply,
        registry.Send("DELETE", "/v1/services/" + service + "/instances/" + id +
                                    "?generation=" + std::to_string(generation)));
    if (reply.status == 404) return false;  // it deregistered itself meanwhile
    if (reply.status != 200) {
      return UnavailableError("registry answered " + std::to_string(reply.status) + ": " +
                              reply.body);
    }
    return true;
  }
  return false;
}

Result<bool> RegistryDrain(const net::HttpClient& registry, const std::string& service,
                           const std::string& id) {
  DROVER_ASSIGN_OR_RETURN(const json instances, RegistryInstances(registry, service));
  for (const json& in : instances) {
    if (in.value("id", "") != id) continue;
    if (in.value("state", "") == "DRAINING") return false;
    const json body = {{"generation", in.value("generation", std::uint64_t{0})},
                       {"state", "DRAINING"}};
    DROVER_ASSIGN_OR_RETURN(
        net::HttpResult reply,
        registry.Send("POST", "/v1/services/" + service + "/instances/" + id + "/state",
                      body.dump()));
    if (reply.status == 404) return false;  // it left meanwhile
    if (reply.status != 200) return StatusOfErrorReply(reply.status, reply.body, "registry");
    return true;
  }
  return false;
}

Status RegistryDeployLog::Save(const std::string& id, const json& record) {
  json body = {{"expect_version", version_},
               {"active", !record.contains("finished_at_ms")},
               {"record", record}};
  if (!control_.is_null()) body["record"]["control"] = control_;
  for (int attempt = 0; attempt < 5; ++attempt) {
    DROVER_ASSIGN_OR_RETURN(
        net::HttpResult reply,
        registry_.Send("PUT", "/v1/deploys/" + id,
                       body.dump(-1, ' ', false, json::error_handler_t::replace)));
    if (reply.status == 200) {
      const json answer = json::parse(reply.body, nullptr, false);
      if (answer.is_discarded()) return UnavailableError("registry sent a reply that is not JSON");
      version_ = answer.value("version", version_ + 1);
      return Status::Ok();
    }
    Status s = StatusOfErrorReply(reply.status, reply.body, "registry");
    if (s.code() != StatusCode::kAborted || version_ == 0) return s;
    // Someone else wrote: take their version, and what they asked of this deploy -- unless it
    // was another controller, which runs the deploy now.
    DROVER_ASSIGN_OR_RETURN(net::HttpResult stored, registry_.Send("GET", "/v1/deploys/" + id));
    const json current = json::parse(stored.body, nullptr, false);
    if (stored.status != 200 || current.is_discarded()) return s;
    const std::string holder =
        current["record"].value("controller", json::object()).value("owner", "");
    if (!holder.empty() && holder != owner_ && holder != replaced_) {
      return AbortedError("deploy " + id + " taken over by " + holder);
    }
    version_ = current.value("version", version_);
    body["expect_version"] = version_;
    if (current.contains("record") && current["record"].contains("control")) {
      control_ = current["record"]["control"];
      body["record"]["control"] = control_;
    }
  }
  return AbortedError("deploy " + id + ": the registry's record kept changing under this writer");
}

Result<json> RegistryDeploy(const net::HttpClient& registry, const std::string& id) {
  DROVER_ASSIGN_OR_RETURN(net::HttpResult reply, registry.Send("GET", "/v1/deploys/" + id));
  if (reply.status != 200) return StatusOfErrorReply(reply.status, reply.body, "registry");
  json deploy = json::parse(reply.body, nullptr, false);
  if (deploy.is_discarded() || !deploy.is_object()) {
    return UnavailableError("registry sent a deploy that is not JSON");
  }
  return deploy;
}

Result<json> RequestRollout(const net::HttpClient& registry, const std::string& id,
                            const std::string& request) {
  if (request != "pause" && request != "resume" && request != "abort" && request != "promote") {
    return InvalidArgumentError("ask a deploy to pause, resume, abort or promote, not '" + request +
                                "'");
  }
  for (int attempt = 0; attempt < 10; ++attempt) {
    DROVER_ASSIGN_OR_RETURN(json deploy, RegistryDeploy(registry, id));
    if (!deploy.value("active", false)) {
      return FailedPreconditionError("deploy " + id + " is not running (" +
                                     deploy["record"].value("verdict", "?") + ": " +
                                     deploy["record"].value("reason", "") + ")");
    }
    json record = deploy["record"];
    record["control"] = {{"request", request},
                         {"at_ms", ToUnixMillis(std::chrono::system_clock::now())}};
    const json body = {{"expect_version", deploy["version"]}, {"active", true}, {"record", record}};
    DROVER_ASSIGN_OR_RETURN(net::HttpResult reply,
                            registry.Send("PUT", "/v1/deploys/" + id, body.dump()));
    if (reply.status == 200) return RegistryDeploy(registry, id);
    Status s = StatusOfErrorReply(reply.status, reply.body, "registry");
    if (s.code() != StatusCode::kAborted) return s;  // else the controller wrote: again
  }
  return AbortedError("deploy " + id + " kept changing; ask again");
}

namespace {

// The request `drover rollout` left in the deploy's record, or "".
std::string ControlRequest(const net::HttpClient& registry, const std::string& id) {
  auto deploy = RegistryDeploy(registry, id);
  if (!deploy.ok() || !(*deploy)["record"].contains("control")) return "";
  return (*deploy)["record"]["control"].value("request", "");
}

// "zone=eu-1,tier=a" as label pairs; "" and "all" as none (every agent).
Result<std::map<std::string, std::string>> ParseSelector(const std::string& selector) {
  std::map<std::string, std::string> wanted;
  if (selector.empty() || selector == "all") return wanted;
  std::size_t start = 0;
  while (start <= selector.size()) {
    const std::size_t comma = std::min(selector.find(',', start), selector.size());
    const std::string pair = selector.substr(start, comma - start);
    const std::size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgumentError("--agents wants all or key=value[,key=value], got '" + selector +
                                  "'");
    }
    wanted[pair.substr(0, eq)] = pair.substr(eq + 1);
    start = comma + 1;
  }
  return wanted;
}

}  // namespace

Result<std::vector<AgentTarget>> DiscoverAgents(const net::HttpClient& registry,
                                                const std::string& selector) {
  DROVER_ASSIGN_OR_RETURN(const auto wanted, ParseSelector(selector));
  DROVER_ASSIGN_OR_RETURN(const json instances, RegistryInstances(registry, kAgentService));
  std::vector<AgentTarget> out;
  std::vector<std::string> seen;
  for (const json& in : instances) {
    AgentTarget a;
    a.name = in.value("id", "");
    a.zone = in.value("zone", "");
    if (in.contains("labels") && in["labels"].is_object()) {
      for (const auto& [k, v] : in["labels"].items()) {
        if (v.is_string()) a.labels[k] = v.get<std::string>();
      }
    }
    seen.push_back(a.name + " (" + in.value("state", "") + ")");
    if (in.value("state", "") != "READY") continue;
    const bool match = std::all_of(wanted.begin(), wanted.end(), [&](const auto& kv) {
      auto l = a.labels.find(kv.first);
      return l != a.labels.end() && l->second == kv.second;
    });
    if (!match) continue;
    const auto scheme = a.labels.find("scheme");
    a.url = (scheme != a.labels.end() ? scheme->second : "http") + "://" + in.value("address", "");
    if (auto c = a.labels.find("capacity"); c != a.labels.end()) {
      try {
        a.capacity = std::stoi(c->second);
      } catch (const std::exception&) {
        a.capacity = 0;
      }
    }
    out.push_back(std::move(a));
  }
  if (out.empty()) {
    std::string registered;
    for (const std::string& s : seen) registered += (registered.empty() ? "" : ", ") + s;
    return NotFoundError("no READY agent matches --agents '" + selector +
                         "' (registered: " + (registered.empty() ? "none" : registered) + ")");
  }
  std::sort(out.begin(), out.end(),
            [](const AgentTarget& x, const AgentTarget& y) { return x.name < y.name; });
  return out;
}

Result<std::vector<AgentTarget>> AgentTargets(const std::vector<std::string>& urls,
                                              const std::string& selector,
                                              const net::HttpClient& registry) {
  if (!selector.empty()) return DiscoverAgents(registry, selector);
  std::vector<AgentTarget> out;
  for (const std::string& url :
       urls.empty() ? std::vector<std::string>{"http://127.0.0.1:7080"} : urls) {
    AgentTarget a;
    a.url = url;
    const std::size_t scheme = url.find("://");
    a.name = scheme == std::string::npos ? url : url.substr(scheme + 3);
    out.push_back(std::move(a));
  }
  return out;
}

namespace {

// What an agent keeps of a deploy's record for its dashboard panel: not the spec, placement and
// old launches a resuming controller needs (those grow with the fleet, and an agent takes 64 KiB
// bodies), and the newest 100 steps of the timeline.
json AgentCopy(const json& record) {
  json copy = record;
  for (const char* bulky : {"spec", "placement", "old", "removals"}) copy.erase(bulky);
  constexpr std::size_t kSteps = 100;
  if (copy.contains("timeline") && copy["timeline"].size() > kSteps) {
    json& steps = copy["timeline"];
    steps.erase(steps.begin(), steps.end() - static_cast<std::ptrdiff_t>(kSteps));
  }
  return copy;
}

// A deployer over `agents`, judged against the registry (readiness; DRAINING before a stop; the
// entries stopped instances left behind), keeping its record through `log` and steered by the
// requests `drover rollout` leaves in it.
Deployer RegistryDeployer(const std::vector<AgentHost>& agents, const net::HttpClient& registry,
                          Clock& clock, DeployLog log) {
  std::vector<DeployHost> hosts;
  for (const AgentHost& a : agents) hosts.push_back({a.name, a.url, a.zone, a.capacity, a.client});
  Deployer deployer(
      std::move(hosts),
      [&registry](const std::string& service) { return RegistryReadiness(registry, service); },
      std::move(log), clock,
      [&registry](const std::string& service, const std::string& id) {
        return RegistryForget(registry, service, id);
      },
      [&registry](const std::string& service, const std::string& id) {
        return RegistryDrain(registry, service, id);
      });
  // The controller asks at every observation; the registry is read at most once a second.
  deployer.set_control(
      [&registry, last = std::string(),
       read_at = std::chrono::steady_clock::time_point()](const std::string& id) mutable {
        const auto now = std::chrono::steady_clock::now();
        if (now - read_at >= std::chrono::seconds(1)) {
          last = ControlRequest(registry, id);
          read_at = now;
        }
        return last;
      });
  return deployer;
}

}  // namespace

DeployOutcome DeployThroughAgents(const std::vector<AgentHost>& agents, net::HttpClient registry,
                                  Clock& clock, const DeploySpec& spec, std::stop_token stop) {
  RegistryDeployLog log(registry, ControllerName());
  json agents_saw;  // what the agents were last sent, without its timeline
  Deployer deployer =
      RegistryDeployer(agents, registry, clock, [&](const std::string& id, const json& record) {
        // The registry's copy is the deploy's; each agent keeps a summary for its dashboard
        // panel.
        const Status kept = log.Save(id, record);
        // A lease renewal or one more step of the timeline is not worth a PUT to every agent.
        json summary = AgentCopy(record);
        summary.erase("controller");
        json changes = summary;
        changes.erase("timeline");
        if (changes == agents_saw && !record.contains("finished_at_ms")) return kept;
        agents_saw = std::move(changes);
        for (const AgentHost& a : agents) {
          if (Status s = a.client->Record(id, summary); !s.ok()) {
            spdlog::warn("deploy {}: {} could not keep the record: {}", id, a.name, s.ToString());
          }
        }
        return kept;
      });
  return deployer.Run(spec, std::move(stop), ControllerName());
}

DeployOutcome ResumeThroughAgents(const json& deploy, const std::vector<AgentHost>& agents,
                                  net::HttpClient registry, Clock& clock, std::stop_token stop) {
  json record = deploy.value("record", json::object());
  const std::string replaced = record.value("controller", json::object()).value("owner", "");
  // A takeover goes on: a pause asked of the dead controller is lifted.
  record["control"] = {{"request", "resume"},
                       {"at_ms", ToUnixMillis(std::chrono::system_clock::now())}};
  RegistryDeployLog log(registry, ControllerName(), deploy.value("version", std::uint64_t{0}),
                        replaced);
  Deployer deployer =
      RegistryDeployer(agents, registry, clock,
                       [&](const std::string& id, const json& r) { return log.Save(id, r); });
  return deployer.Resume(record, std::move(stop), ControllerName());
}

bool ControllerAlive(const json& deploy) {
  const json controller =
      deploy.value("record", json::object()).value("controller", json::object());
  return controller.value("lease_until_ms", std::int64_t{0}) >
         ToUnixMillis(std::chrono::system_clock::now());
}

std::string ControllerName() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "localhost");
  return std::string(host) + ":" + std::to_string(::getpid());
}

DeployOutcome DeployThroughAgent(AgentClient& agent, net::HttpClient registry, Clock& clock,
                                 const DeploySpec& spec, std::stop_token stop) {
  return DeployThroughAgents({AgentHost{"agent", "", "", 0, &agent}}, std::move(registry), clock,
                             spec, std::move(stop));
}

}  // namespace drover::rollout
