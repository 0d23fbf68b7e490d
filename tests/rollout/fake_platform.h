// An in-memory Platform for unit tests of the deploy controller and the agent's HTTP API: every
// call is logged, instances run the moment they start, and a crash-looping instance gains one
// crash and one restart on every List -- with the list bounded to the newest 5 events, as on a
// real platform. Thread-safe (the agent's API calls it from a thread per connection).
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "rollout/platform.h"

namespace drover::rollout {

class FakePlatform final : public Platform {
 public:
  explicit FakePlatform(Clock& clock) : clock_(clock) {}

  // Knobs, set before use.
  std::set<std::string> crash_looping;   // ids that crash and restart on every List
  std::string fail_start;                // an id whose Start fails
  std::atomic<bool> unreachable{false};  // every call fails UNAVAILABLE
  std::set<std::string> refuse_stop;     // ids whose Stop fails UNAVAILABLE
  // Called on every Stop before the instance goes, and after every successful Start, with the
  // id (for invariants).
  std::function<void(const std::string& id)> on_stop;
  std::function<void(const std::string& id)> on_start;

  Status Start(const LaunchSpec& spec) override {
    Status started = StartLocked(spec);
    if (started.ok() && on_start) on_start(spec.id);
    return started;
  }

  Status StartLocked(const LaunchSpec& spec) {
    std::lock_guard lock(mu_);
    if (unreachable) return UnavailableError("platform unreachable");
    if (Status s = ValidateLaunchSpec(spec); !s.ok()) return s;
    calls_.push_back("start " + spec.id);
    started_.push_back(spec);
    if (spec.id == fail_start) return UnavailableError("no room for " + spec.id);
    if (instances_.count(spec.id) > 0) return AlreadyExistsError("instance " + spec.id);
    InstanceInfo& info = instances_[spec.id];
    info.spec = spec;
    info.status = InstanceStatus::kRunning;
    info.pid = next_pid_++;
    Event(info, EventKind::kStarted, "pid " + std::to_string(info.pid));
    return Status::Ok();
  }

  Status Stop(const std::string& id, Duration grace) override {
    std::function<void(const std::string&)> hook;
    {
      std::lock_guard lock(mu_);
      if (unreachable) return UnavailableError("platform unreachable");
      calls_.push_back(
          "stop " + id + " " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(grace).count()));
      if (instances_.count(id) == 0) return NotFoundError("no instance " + id);
      if (refuse_stop.count(id) > 0) return UnavailableError("cannot reach the host of " + id);
      hook = on_stop;
    }
    if (hook) hook(id);
    std::lock_guard lock(mu_);
    instances_.erase(id);
    return Status::Ok();
  }

  Result<std::vector<InstanceInfo>> List(const std::string& service) override {
    std::lock_guard lock(mu_);
    if (unreachable) return UnavailableError("platform unreachable");
    std::vector<InstanceInfo> out;
    for (auto& [id, info] : instances_) {
      if (crash_looping.count(id) > 0) {
        Event(info, EventKind::kCrashed, "exited with code 1");
        Event(info, EventKind::kStarted, "pid " + std::to_string(next_pid_++));
      }
      if (service.empty() || info.spec.service == service) out.push_back(info);
    }
    return out;
  }

  std::vector<std::string> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  std::vector<LaunchSpec> started() const {
    std::lock_guard lock(mu_);
    return started_;
  }
  std::set<std::string> ids() const {
    std::lock_guard lock(mu_);
    std::set<std::string> out;
    for (const auto& [id, info] : instances_) out.insert(id);
    return out;
  }

 private:
  void Event(InstanceInfo& info, EventKind kind, std::string detail) {
    info.events.push_back({kind, clock_.SystemNow(), std::move(detail)});
    if (info.events.size() > 5) info.events.erase(info.events.begin());
  }

  Clock& clock_;
  mutable std::mutex mu_;
  std::map<std::string, InstanceInfo> instances_;
  std::vector<std::string> calls_;
  std::vector<LaunchSpec> started_;
  int next_pid_ = 1000;
};

}  // namespace drover::rollout
