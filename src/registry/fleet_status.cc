#include "registry/fleet_status.h"

#include <algorithm>
#include <vector>

#include "common/thread_name.h"
#include "drover/discovery.h"
#include "net/http_client.h"
#include "registry/registry.h"

namespace drover::registry {
namespace {

// The one read path per kind of part; empty for a service that is not a fleet part.
std::string PathOf(const std::string& service) {
  if (service == kGatewayService) return "/admin/snapshot";
  if (service == kAgentService) return "/v1/deploys";
  return "";
}

}  // namespace

FleetStatus::FleetStatus(const Registry& registry, FleetStatusOptions options)
    : registry_(registry), options_(std::move(options)), thread_([this](std::stop_token stop) {
        NameThisThread("fleet-status");
        Run(stop);
      }) {}

FleetStatus::~FleetStatus() {
  thread_.request_stop();  // wakes the wait; a fetch in progress ends within its timeout
  if (thread_.joinable()) thread_.join();
}

Result<FleetAnswer> FleetStatus::Get(const std::string& service, const std::string& id) {
  if (PathOf(service).empty()) {
    return InvalidArgumentError("'" + service + "' is not a fleet part: use " +
                                std::string(kGatewayService) + " or " + kAgentService);
  }
  const auto list = registry_.List(service);
  if (!list.ok()) return list.status();
  const bool registered = std::any_of(list->instances.begin(), list->instances.end(),
                                      [&](const Instance& in) { return in.id == id; });
  if (!registered) return NotFoundError(service + "/" + id + " is not registered");
  const MonoTime now = MonoClock::now();
  MutexLock lock(mu_);
  auto it = parts_.find({service, id});
  if (it == parts_.end()) {
    if (parts_.size() >= options_.max_parts) {
      return ResourceExhaustedError("the registry follows at most " +
                                    std::to_string(options_.max_parts) + " fleet parts at once");
    }
    it = parts_.try_emplace({service, id}).first;
  }
  Part& part = it->second;
  part.wanted_until = now + options_.interest;
  if (!part.fetched) {
    pending_ = true;
    wake_.NotifyAll();
    return UnavailableError("fetching the status of " + service + "/" + id + "; ask again");
  }
  if (!part.error.empty()) return UnavailableError(part.error);
  FleetAnswer answer = part.answer;
  answer.age = now - part.fetched_at;
  return answer;
}

void FleetStatus::Fetch(const Key& key, Part& part) const {
  const auto& [service, id] = key;
  part.fetched = true;
  part.fetched_at = MonoClock::now();
  const auto list = registry_.List(service);
  const Instance* found = nullptr;
  if (list.ok()) {
    for (const Instance& in : list->instances) {
      if (in.id == id) found = &in;
    }
  }
  if (found == nullptr) {
    part.error = service + "/" + id + " is no longer registered";
    return;
  }
  const auto scheme = found->spec.labels.find("scheme");
  const std::string base =
      (scheme != found->spec.labels.end() && scheme->second == "https" ? "https://" : "http://") +
      found->spec.address;
  const std::string path = PathOf(service);
  part.answer.url = base + path;
  auto client = net::HttpClient::Create(base, "", options_.timeout, options_.ca_file,
                                        service + "/" + id + " at " + found->spec.address);
  if (!client.ok()) {
    part.error = client.status().message();
    return;
  }
  auto reply = client->Send("GET", path);
  if (!reply.ok()) {
    part.error = reply.status().message();
    return;
  }
  part.error.clear();
  part.answer.status = reply->status;
  part.answer.body = std::move(reply->body);
}

void FleetStatus::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::vector<std::pair<Key, Part>> wanted;
    {
      MutexLock lock(mu_);
      (void)wake_.WaitUntil(mu_, stop, MonoClock::now() + options_.interval,
                            [&]() DROVER_REQUIRES(mu_) { return pending_; });
      if (stop.stop_requested()) return;
      pending_ = false;
      const MonoTime now = MonoClock::now();
      std::erase_if(parts_, [&](const auto& kv) { return kv.second.wanted_until <= now; });
      for (const auto& [key, part] : parts_) wanted.emplace_back(key, part);
    }
    // Outside the lock: a slow part delays the others' next fetch, never a request.
    for (auto& [key, part] : wanted) Fetch(key, part);
    MutexLock lock(mu_);
    for (auto& [key, part] : wanted) {
      auto it = parts_.find(key);
      if (it == parts_.end()) continue;
      const MonoTime wanted_until = it->second.wanted_until;
      it->second = std::move(part);
      it->second.wanted_until = wanted_until;
    }
  }
}

}  // namespace drover::registry
