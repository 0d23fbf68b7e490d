#include "rollout/deployer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <set>

namespace drover::rollout {
namespace {

using json = nlohmann::json;

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

std::string Join(const std::vector<std::string>& ids) {
  std::string out;
  for (const std::string& id : ids) out += (out.empty() ? "" : ", ") + id;
  return out;
}

// Why the spec cannot be deployed at all, or nullopt.
std::optional<std::string> SpecError(const DeploySpec& spec) {
  if (Status s = ValidateLaunchSpec(LaunchSpec{spec.service, spec.service + "-" + spec.version,
                                               spec.version, spec.argv, spec.env});
      !s.ok() || spec.instances < 1) {
    return s.ok() ? "instances must be at least 1" : s.message();
  }
  if (Status s = ValidateGateOptions(spec.gate); !s.ok()) return s.message();
  return std::nullopt;
}

// The launch of the n-th new instance: its id, and the command line and environment as given
// ("{port}", "{health_port}" and "{host}" are filled by the agent that runs it, on its host).
LaunchSpec LaunchOf(const DeploySpec& spec, int n) {
  LaunchSpec launch;
  launch.service = spec.service;
  launch.version = spec.version;
  launch.id = spec.service + "-" + spec.version + "-" + std::to_string(n);
  launch.argv = spec.argv;
  launch.env = spec.env;
  return launch;
}

}  // namespace

void Deployer::Note(DeployOutcome& out, const std::string& what) {
  const double at = Seconds(clock_.Now() - began_);
  spdlog::info("deploy {}: +{:.1f} s {}", out.id, at, what);
  out.record["timeline"].push_back(
      {{"at_ms", ToUnixMillis(clock_.SystemNow())}, {"after_s", at}, {"what", what}});
}

void Deployer::Save(DeployOutcome& out) {
  if (!log_) return;
  if (Status s = log_(out.id, out.record); !s.ok()) {
    spdlog::warn("deploy {}: could not record the deploy: {}", out.id, s.ToString());
  }
}

bool Deployer::StopInstance(DeployOutcome& out, const DeploySpec& spec, const std::string& id) {
  // The platform may be briefly unreachable: an instance left running is worse than a slow
  // rollback, so a failed stop is tried again, up to three times.
  Status stopped;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    stopped = platform_.Stop(id, spec.stop_grace);
    if (stopped.ok() || stopped.code() == StatusCode::kNotFound) break;
    Note(out,
         "stopping " + id + " (attempt " + std::to_string(attempt) + "): " + stopped.message());
    if (attempt < 3) clock_.SleepFor(std::chrono::seconds(attempt), {});
  }
  if (!stopped.ok() && stopped.code() != StatusCode::kNotFound) {
    out.left_running.push_back(id);
    out.record["left_running"] = out.left_running;
    return false;  // it may still run: its registry entry stays its own
  }
  if (!deregister_) return true;
  auto removed = deregister_(spec.service, id);
  if (!removed.ok()) {
    Note(out, "could not remove " + id + "'s registry entry: " + removed.status().message());
  } else if (*removed) {
    Note(out, "removed the registry entry " + id + " left behind");
  }
  return true;
}

// Stops the new instances after a failure and notes whether every one of them is gone.
void Deployer::RollBack(DeployOutcome& out, const DeploySpec& spec,
                        const std::vector<std::string>& new_ids, std::size_t old_count) {
  const MonoTime rollback = clock_.Now();
  bool all = true;
  for (const std::string& id : new_ids) all = StopInstance(out, spec, id) && all;
  out.rollback_took = clock_.Now() - rollback;
  if (all) {
    Note(out, "rolled back: the new instances are stopped; " + std::to_string(old_count) +
                  " old instance(s) kept serving throughout");
  } else {
    Note(out, "ROLLBACK INCOMPLETE: could not stop " + Join(out.left_running) +
                  "; stop them by hand (drover agent API: DELETE /v1/instances/<id>)");
  }
}

DeployOutcome Deployer::Begin(const DeploySpec& spec) {
  DeployOutcome out;
  began_ = clock_.Now();
  const SystemTime began_system = clock_.SystemNow();
  out.id = spec.service + "-" + spec.version + "-" + std::to_string(ToUnixMillis(began_system));
  out.record = {{"service", spec.service},     {"version", spec.version},
                {"instances", spec.instances}, {"started_at_ms", ToUnixMillis(began_system)},
                {"verdict", "running"},        {"reason", ""},
                {"timeline", json::array()}};
  return out;
}

DeployOutcome Deployer::Finish(DeployOutcome out, Verdict verdict, std::string reason) {
  out.verdict = verdict;
  out.reason = std::move(reason);
  out.finished_after = clock_.Now() - began_;
  out.record["verdict"] = std::string(VerdictName(verdict));
  out.record["reason"] = out.reason;
  out.record["finished_at_ms"] = ToUnixMillis(clock_.SystemNow());
  out.record["decided_after_s"] = Seconds(out.decided_after);
  out.record["rollback_s"] = Seconds(out.rollback_took);
  Save(out);
  return out;
}

Result<std::vector<std::string>> Deployer::OldInstances(DeployOutcome& out,
                                                        const DeploySpec& spec) {
  auto current = platform_.List(spec.service);
  if (!current.ok()) {
    return FailedPreconditionError("cannot list " + spec.service +
                                   " on the platform: " + current.status().message());
  }
  std::vector<std::string> old_ids;
  std::set<std::string> old_versions;
  for (const InstanceInfo& i : *current) {
    if (i.spec.version == spec.version) {
      return FailedPreconditionError("version " + spec.version + " of " + spec.service +
                                     " is already deployed (instance " + i.spec.id + ")");
    }
    old_ids.push_back(i.spec.id);
    old_versions.insert(i.spec.version);
  }
  out.record["previous"] = {{"versions", old_versions}, {"instances", old_ids}};
  return old_ids;
}

Result<std::vector<std::string>> Deployer::StartNew(DeployOutcome& out, const DeploySpec& spec,
                                                    std::size_t old_count) {
  std::vector<std::string> new_ids;
  for (int n = 1; n <= spec.instances; ++n) {
    const LaunchSpec launch = LaunchOf(spec, n);
    if (Status s = platform_.Start(launch); !s.ok()) {
      Note(out, "could not start " + launch.id + ": " + s.message());
      // Whatever did start goes again -- this one too, unless it certainly did not start (a
      // timeout may hide a start that happened) or is someone else's.
      if (s.code() != StatusCode::kAlreadyExists && s.code() != StatusCode::kInvalidArgument) {
        new_ids.push_back(launch.id);
      }
      RollBack(out, spec, new_ids, old_count);
      return s.WithContext("could not start " + launch.id);
    }
    new_ids.push_back(launch.id);
    // Recorded as it happens: if this controller dies now, the record names what runs.
    out.record["new_instances"] = new_ids;
    Save(out);
  }
  return new_ids;
}

std::vector<Observation> Deployer::ObserveNew(DeployOutcome& out, const DeploySpec& spec,
                                              const std::vector<std::string>& new_ids,
                                              std::string& data_error) {
  std::vector<Observation> seen;
  auto listed = platform_.List(spec.service);
  auto ready = readiness_(spec.service);
  const std::string error = !listed.ok()  ? "platform: " + listed.status().message()
                            : !ready.ok() ? "registry: " + ready.status().message()
                                          : "";
  if (error != data_error && !error.empty()) Note(out, "no data this time: " + error);
  if (!error.empty()) data_error = error;
  if (listed.ok() && ready.ok()) {
    for (const std::string& id : new_ids) {
      Observation o;
      o.id = id;
      for (InstanceInfo& i : *listed) {
        if (i.spec.id == id) o.platform = std::move(i);
      }
      auto r = ready->find(id);
      o.ready = r != ready->end() && r->second;
      seen.push_back(std::move(o));
    }
  }
  return seen;
}

GateResult Deployer::Gate(DeployOutcome& out, const DeploySpec& spec,
                          const std::vector<std::string>& new_ids, std::stop_token stop) {
  HealthGate gate(new_ids, began_, spec.gate);
  GateResult verdict;
  std::string last_wait;
  std::string data_error;  // why the last observation had no data, for the log and the reason
  while (verdict.verdict == Verdict::kPending) {
    if (stop.stop_requested()) {
      verdict = GateResult{Verdict::kFail, "deploy interrupted"};
      break;
    }
    const std::vector<Observation> seen = ObserveNew(out, spec, new_ids, data_error);
    verdict = gate.Observe(clock_.Now(), seen);
    if (verdict.verdict == Verdict::kPending && gate.waiting_for() != last_wait) {
      last_wait = gate.waiting_for();
      Note(out, "waiting for " + last_wait);
    }
    if (verdict.verdict == Verdict::kPending) clock_.SleepFor(spec.poll, stop);
  }
  out.decided_after = clock_.Now() - began_;
  if (verdict.verdict == Verdict::kFail && !data_error.empty() &&
      verdict.reason.find("data") != std::string::npos) {
    verdict.reason += " (last error: " + data_error + ")";
  }
  return verdict;
}

void Deployer::RetireOld(DeployOutcome& out, const DeploySpec& spec,
                         const std::vector<std::string>& old_ids) {
  for (const std::string& id : old_ids) {
    Note(out, "stopping old instance " + id);
    StopInstance(out, spec, id);
  }
  if (out.left_running.empty()) {
    Note(out, "done: " + spec.service + " runs " + spec.version);
  } else {
    Note(out, "done, but old instance(s) " + Join(out.left_running) +
                  " could not be stopped; stop them by hand");
  }
}

DeployOutcome Deployer::Run(const DeploySpec& spec, std::stop_token stop) {
  DeployOutcome out = Begin(spec);
  if (std::optional<std::string> invalid = SpecError(spec)) {
    return Finish(std::move(out), Verdict::kFail, *std::move(invalid));
  }

  // The version running now: never touched until the new one passes.
  auto old_ids = OldInstances(out, spec);
  if (!old_ids.ok()) return Finish(std::move(out), Verdict::kFail, old_ids.status().message());
  Note(out, "deploy of " + spec.service + " " + spec.version + " began; " +
                std::to_string(old_ids->size()) + " old instance(s) keep serving");
  Save(out);

  // 1. The new instances, next to the old.
  auto new_ids = StartNew(out, spec, old_ids->size());
  if (!new_ids.ok()) return Finish(std::move(out), Verdict::kFail, new_ids.status().message());
  Note(out, "started " + std::to_string(new_ids->size()) + " new instance(s); gating");

  // 2. The gate.
  const GateResult verdict = Gate(out, spec, *new_ids, stop);

  if (verdict.verdict == Verdict::kFail) {
    // 3b. Roll back: the new instances go, the old were never touched.
    Note(out, "FAILED: " + verdict.reason + "; stopping the new instances");
    out.record["verdict"] = "fail";
    out.record["reason"] = verdict.reason;
    Save(out);
    RollBack(out, spec, *new_ids, old_ids->size());
    return Finish(std::move(out), Verdict::kFail, verdict.reason);
  }

  // 3a. Pass: the old instances go, one at a time, in the SDK's shutdown order.
  Note(out, "PASSED: " + verdict.reason);
  out.record["verdict"] = "pass";
  out.record["reason"] = verdict.reason;
  Save(out);
  RetireOld(out, spec, *old_ids);
  return Finish(std::move(out), Verdict::kPass, verdict.reason);
}

}  // namespace drover::rollout
