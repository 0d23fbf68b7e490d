#include "demo/ready_watch.h"

#include <algorithm>

#include "rollout/agent_client.h"

namespace drover::demo {

using std::chrono::milliseconds;

ReadyWatch::ReadyWatch(net::HttpClient registry, std::vector<std::string> services)
    : registry_(std::move(registry)), services_(std::move(services)) {
  poller_ = std::jthread([this](std::stop_token stop) { Poll(stop); });
}

ReadyWatch::~ReadyWatch() {
  poller_.request_stop();
  poller_.join();
}

void ReadyWatch::Poll(std::stop_token stop) {
  RealClock clock;
  while (!stop.stop_requested()) {
    for (const std::string& service : services_) {
      auto ready = rollout::RegistryReadiness(registry_, service);
      if (!ready.ok()) continue;  // the next poll tries again; a demo step waits with a deadline
      const MonoTime now = clock.Now();
      MutexLock lock(mu_);
      std::set<std::string>& now_ready = ready_now_[service];
      now_ready.clear();
      for (const auto& [id, is_ready] : *ready) {
        if (!is_ready) continue;
        now_ready.insert(id);
        first_ready_.emplace(id, now);
      }
    }
    clock.SleepFor(milliseconds(100), stop);
  }
}

std::optional<MonoTime> ReadyWatch::ReadySince(const std::string& id) const {
  MutexLock lock(mu_);
  const auto it = first_ready_.find(id);
  if (it == first_ready_.end()) return std::nullopt;
  return it->second;
}

std::set<std::string> ReadyWatch::ReadyNow(const std::string& service) const {
  MutexLock lock(mu_);
  const auto it = ready_now_.find(service);
  return it == ready_now_.end() ? std::set<std::string>{} : it->second;
}

bool ReadyWatch::WaitReady(const std::vector<std::string>& ids, Duration limit,
                           std::stop_token stop) const {
  RealClock clock;
  const MonoTime until = clock.Now() + limit;
  while (!stop.stop_requested() && clock.Now() < until) {
    if (std::all_of(ids.begin(), ids.end(),
                    [this](const std::string& id) { return ReadySince(id).has_value(); })) {
      return true;
    }
    clock.SleepFor(milliseconds(50), stop);
  }
  return false;
}

}  // namespace drover::demo
