#include "rollout/health_gate.h"

#include <algorithm>

namespace drover::rollout {
namespace {

std::string Seconds(Duration d) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  return std::to_string(ms / 1000) + "." + std::to_string((ms % 1000) / 100) + " s";
}

}  // namespace

std::string_view VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPending:
      return "pending";
    case Verdict::kPass:
      return "pass";
    case Verdict::kFail:
      return "fail";
  }
  return "?";
}

Status ValidateGateOptions(const GateOptions& o) {
  if (o.check_delay <= Duration::zero()) return InvalidArgumentError("check delay must be > 0");
  if (o.min_healthy < o.check_delay) {
    return InvalidArgumentError("min healthy (" + Seconds(o.min_healthy) +
                                ") must be at least the check delay (" + Seconds(o.check_delay) +
                                ")");
  }
  if (o.progress_deadline <= o.min_healthy + 2 * o.check_delay) {
    return InvalidArgumentError("progress deadline (" + Seconds(o.progress_deadline) +
                                ") must exceed min healthy + 2 x check delay (" +
                                Seconds(o.min_healthy + 2 * o.check_delay) +
                                "): a healthy version could never pass");
  }
  return Status::Ok();
}

HealthGate::HealthGate(std::vector<std::string> instances, MonoTime began, GateOptions options)
    : instances_(std::move(instances)), began_mono_(began), options_(options) {}

GateResult HealthGate::Fail(std::string reason) {
  result_ = GateResult{Verdict::kFail, std::move(reason)};
  return result_;
}

GateResult HealthGate::Pass(std::string reason) {
  result_ = GateResult{Verdict::kPass, std::move(reason)};
  return result_;
}

std::string HealthGate::Describe(const Observation& o) const {
  if (!o.platform) return "unknown to the platform";
  std::string out = std::string(InstanceStatusName(o.platform->status));
  out += o.ready ? ", READY" : ", not READY";
  if (!o.platform->events.empty()) {
    const InstanceEvent& last = o.platform->events.back();
    out += ", last event " + std::string(EventKindName(last.kind)) + ": " + last.detail;
  }
  return out;
}

std::string HealthGate::CrashMovedSince(const std::map<std::string, SystemTime>& before,
                                        bool new_counts) const {
  for (const auto& [id, at] : latest_crash_) {
    auto it = before.find(id);
    if (it == before.end() ? new_counts : it->second != at) return id;
  }
  return "";
}

std::optional<std::string> HealthGate::Record(MonoTime now, const std::string& id,
                                              const Observation& o) {
  if (!o.platform) return "instance " + id + " vanished from the platform";
  for (const InstanceEvent& e : o.platform->events) {
    if (e.kind == EventKind::kGaveUp && e.detail.starts_with("cannot run")) {
      return "instance " + id + " could not be started: " + e.detail;
    }
    if (e.kind == EventKind::kGaveUp) {
      return "instance " + id + " crashed repeatedly since deploy began and the " +
             "platform gave up restarting it (" + e.detail + ")";
    }
    if (e.kind == EventKind::kCrashed) {
      auto [it, fresh] = latest_crash_.emplace(id, e.at);
      if (!fresh) it->second = std::max(it->second, e.at);
    }
  }
  if (o.platform->status == InstanceStatus::kGaveUp) {
    return "instance " + id + " crashed repeatedly since deploy began and the platform " +
           "gave up restarting it";
  }
  // READY in the registry and a live process: a crashed instance stays READY in the
  // registry until its lease runs out, so the registry alone would vouch for a corpse.
  if (o.ready && o.platform->status == InstanceStatus::kRunning) {
    ready_since_.emplace(id, now);
  } else {
    ready_since_.erase(id);
  }
  return std::nullopt;
}

std::optional<std::string> HealthGate::WatchCrashes(MonoTime now) {
  if (now < next_watch_) return std::nullopt;
  if (const std::string id = CrashMovedSince(crash_at_last_watch_, false); !id.empty()) {
    return "instance " + id + " crashed repeatedly since deploy began and is still " +
           "restarting (a crash newer than the one seen " + Seconds(options_.check_delay) +
           " earlier, before it could stay READY for " + Seconds(options_.min_healthy) + ")";
  }
  crash_at_last_watch_ = latest_crash_;
  next_watch_ = now + options_.check_delay;
  return std::nullopt;
}

bool HealthGate::HealthyLongEnough(MonoTime now, const ById& by_id) {
  for (const std::string& id : instances_) {
    auto it = ready_since_.find(id);
    if (it == ready_since_.end()) {
      waiting_for_ = id + " to be READY (" + Describe(*by_id.at(id)) + ")";
      return false;
    }
    if (now - it->second < options_.min_healthy) {
      waiting_for_ = id + " to stay READY for " + Seconds(options_.min_healthy);
      return false;
    }
  }
  return true;
}

GateResult HealthGate::Check(MonoTime now, const ById& by_id) {
  ++checks_done_;
  for (const std::string& id : instances_) {
    if (ready_since_.count(id) == 0) {
      return Fail("instance " + id + " is not READY at check " + std::to_string(checks_done_) +
                  " (" + Describe(*by_id.at(id)) + ")");
    }
  }
  if (checks_done_ > 1) {
    if (const std::string id = CrashMovedSince(crash_at_last_check_, true); !id.empty()) {
      return Fail("instance " + id + " crashed repeatedly since deploy began and is still " +
                  "restarting (its latest crash is newer than at check " +
                  std::to_string(checks_done_ - 1) + ")");
    }
  }
  crash_at_last_check_ = latest_crash_;
  const std::string checks =
      std::to_string(checks_done_) + " checks " + Seconds(options_.check_delay) + " apart";
  if (checks_done_ == 2 && latest_crash_.empty()) {
    return Pass("every new instance READY for " + Seconds(options_.min_healthy) + " and at " +
                checks + ", no crash since deploy began");
  }
  if (checks_done_ == 3) {
    return Pass("every new instance READY at " + checks + "; " +
                std::to_string(latest_crash_.size()) +
                " crashed after deploy began but not since check 1");
  }
  next_check_ = now + options_.check_delay;
  waiting_for_ = "check " + std::to_string(checks_done_ + 1);
  return result_;
}

GateResult HealthGate::Observe(MonoTime now, const std::vector<Observation>& seen) {
  if (result_.verdict != Verdict::kPending) return result_;
  if (instances_.empty()) return Fail("no new instances to judge: no checks, no pass");

  ById by_id;
  for (const Observation& o : seen) by_id[o.id] = &o;
  const bool complete = std::all_of(instances_.begin(), instances_.end(),
                                    [&](const std::string& id) { return by_id.count(id) > 0; });
  if (complete) {
    any_data_ = true;
    for (const std::string& id : instances_) {
      if (std::optional<std::string> failure = Record(now, id, *by_id[id])) {
        return Fail(*std::move(failure));
      }
    }
  }

  if (now - began_mono_ >= options_.progress_deadline) {
    if (!any_data_) {
      return Fail("no data to judge the new version by within the progress deadline (" +
                  Seconds(options_.progress_deadline) + "): no checks, no pass");
    }
    return Fail("progress deadline (" + Seconds(options_.progress_deadline) +
                ") passed while waiting for " + waiting_for_);
  }
  if (!complete) {
    waiting_for_ = "data about every new instance";
    return result_;
  }

  // 1. READY, continuously, for min_healthy -- with the crash watch meanwhile.
  if (checks_done_ == 0 && next_check_ == MonoTime{}) {
    if (std::optional<std::string> failure = WatchCrashes(now)) return Fail(*std::move(failure));
    if (!HealthyLongEnough(now, by_id)) return result_;
    next_check_ = now;
  }

  // 2. The checks.
  if (now < next_check_) return result_;
  return Check(now, by_id);
}

}  // namespace drover::rollout
