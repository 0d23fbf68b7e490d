#include "rollout/deployer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <set>

#include "rollout/json_codec.h"

namespace drover::rollout {
namespace {

using json = nlohmann::json;
using Instances = std::vector<std::pair<std::string, std::size_t>>;  // id, host

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

std::string Join(const std::vector<std::string>& ids) {
  std::string out;
  for (const std::string& id : ids) out += (out.empty() ? "" : ", ") + id;
  return out;
}

// The spec's budget once the whole spec is found deployable (see ValidateDeploySpec).
Result<Budget> CheckedBudget(const DeploySpec& spec) {
  DROVER_RETURN_IF_ERROR(ValidateLaunchSpec(LaunchSpec{
      spec.service, spec.service + "-" + spec.version, spec.version, spec.argv, spec.env}));
  DROVER_ASSIGN_OR_RETURN(
      const Budget budget,
      ResolveBudget(Strategy{spec.instances, spec.max_surge, spec.max_unavailable, spec.canary}));
  DROVER_RETURN_IF_ERROR(ValidateGateOptions(spec.gate));
  return budget;
}

// The launch of the n-th new instance: its id, and the command line and environment as given
// ("{port}", "{health_port}" and "{host}" are filled by the agent that runs it, on its host).
LaunchSpec LaunchOf(const DeploySpec& spec, std::size_t n) {
  LaunchSpec launch;
  launch.service = spec.service;
  launch.version = spec.version;
  launch.id = spec.service + "-" + spec.version + "-" + std::to_string(n);
  launch.argv = spec.argv;
  launch.env = spec.env;
  return launch;
}

std::int64_t Ms(Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

Status ValidateDeploySpec(const DeploySpec& spec) { return CheckedBudget(spec).status(); }

json DeploySpecToJson(const DeploySpec& spec) {
  return {{"service", spec.service},
          {"version", spec.version},
          {"argv", spec.argv},
          {"env", spec.env},
          {"instances", spec.instances},
          {"max_surge", spec.max_surge.ToString()},
          {"max_unavailable", spec.max_unavailable.ToString()},
          {"canary", spec.canary ? spec.canary->ToString() : ""},
          {"canary_pause_ms", Ms(spec.canary_pause)},
          {"min_healthy_ms", Ms(spec.gate.min_healthy)},
          {"check_delay_ms", Ms(spec.gate.check_delay)},
          {"progress_deadline_ms", Ms(spec.gate.progress_deadline)},
          {"stop_grace_ms", Ms(spec.stop_grace)},
          {"drain_delay_ms", Ms(spec.drain_delay)},
          {"poll_ms", Ms(spec.poll)},
          {"host_timeout_ms", Ms(spec.host_timeout)},
          {"controller_lease_ms", Ms(spec.controller_lease)}};
}

Result<DeploySpec> DeploySpecFromJson(const json& j) {
  try {
    DeploySpec spec;
    spec.service = j.at("service").get<std::string>();
    spec.version = j.at("version").get<std::string>();
    spec.argv = j.at("argv").get<std::vector<std::string>>();
    spec.env = j.at("env").get<std::map<std::string, std::string>>();
    spec.instances = j.at("instances").get<int>();
    DROVER_ASSIGN_OR_RETURN(spec.max_surge,
                            ParseAmount(j.at("max_surge").get<std::string>(), "max_surge"));
    DROVER_ASSIGN_OR_RETURN(
        spec.max_unavailable,
        ParseAmount(j.at("max_unavailable").get<std::string>(), "max_unavailable"));
    if (const std::string canary = j.at("canary").get<std::string>(); !canary.empty()) {
      DROVER_ASSIGN_OR_RETURN(spec.canary, ParseAmount(canary, "canary"));
    }
    const auto ms = [&](const char* key) {
      return std::chrono::milliseconds(j.at(key).get<std::int64_t>());
    };
    spec.canary_pause = ms("canary_pause_ms");
    spec.gate.min_healthy = ms("min_healthy_ms");
    spec.gate.check_delay = ms("check_delay_ms");
    spec.gate.progress_deadline = ms("progress_deadline_ms");
    spec.stop_grace = ms("stop_grace_ms");
    spec.drain_delay = ms("drain_delay_ms");
    spec.poll = ms("poll_ms");
    spec.host_timeout = ms("host_timeout_ms");
    spec.controller_lease = ms("controller_lease_ms");
    return spec;
  } catch (const json::exception& e) {
    return InvalidArgumentError(std::string("the deploy record's spec is not whole: ") + e.what());
  }
}

struct Deployer::Progress {
  std::vector<Old> old;
  std::vector<Fresh> fresh;              // every new instance of the plan
  std::vector<std::size_t> started;      // indexes into fresh: started (or maybe started)
  std::vector<std::size_t> stopped_old;  // indexes into old
};

Deployer::Deployer(std::vector<DeployHost> hosts, ReadinessSource readiness, DeployLog log,
                   Clock& clock, Deregister deregister, MarkDraining drain)
    : hosts_(std::move(hosts)),
      readiness_(std::move(readiness)),
      log_(std::move(log)),
      deregister_(std::move(deregister)),
      drain_(std::move(drain)),
      clock_(clock) {}

void Deployer::Note(DeployOutcome& out, const std::string& what) {
  const double at = Seconds(clock_.Now() - began_);
  spdlog::info("deploy {}: +{:.1f} s {}", out.id, at, what);
  out.record["timeline"].push_back(
      {{"at_ms", ToUnixMillis(clock_.SystemNow())}, {"after_s", at}, {"what", what}});
}

void Deployer::Save(DeployOutcome& out) {
  if (!log_ || taken_over_) return;
  saved_ = clock_.Now();
  out.record["controller"] = {{"owner", owner_},
                              {"lease_until_ms", ToUnixMillis(clock_.SystemNow() + lease_)}};
  if (Status s = log_(out.id, out.record); !s.ok()) {
    if (s.code() == StatusCode::kAborted && s.message().find("taken over") != std::string::npos) {
      taken_over_ = s.message();
      return;
    }
    spdlog::warn("deploy {}: could not record the deploy: {}", out.id, s.ToString());
  }
}

void Deployer::Renew(DeployOutcome& out) {
  if (clock_.Now() - saved_ >= lease_ / 3) Save(out);
}

void Deployer::RecordProgress(DeployOutcome& out, const Progress& progress) {
  json started = json::array(), stopped = json::array();
  for (const std::size_t i : progress.started) started.push_back(progress.fresh[i].id);
  for (const std::size_t i : progress.stopped_old) stopped.push_back(progress.old[i].id);
  out.record["new_instances"] = std::move(started);
  out.record["stopped_old"] = std::move(stopped);
}

std::string Deployer::Where(const std::string& id, std::size_t host) const {
  return hosts_.size() == 1 ? id : id + " on " + hosts_[host].name;
}

DeployOutcome Deployer::Begin(const DeploySpec& spec) {
  DeployOutcome out;
  began_ = clock_.Now();
  const SystemTime began_system = clock_.SystemNow();
  out.id = spec.service + "-" + spec.version + "-" + std::to_string(ToUnixMillis(began_system));
  json hosts = json::array();
  for (const DeployHost& h : hosts_) {
    hosts.push_back({{"name", h.name}, {"zone", h.zone}, {"address", h.address}});
  }
  out.record = {{"id", out.id},
                {"spec", DeploySpecToJson(spec)},
                {"service", spec.service},
                {"version", spec.version},
                {"instances", spec.instances},
                {"started_at_ms", ToUnixMillis(began_system)},
                {"verdict", "running"},
                {"reason", ""},
                {"hosts", std::move(hosts)},
                {"timeline", json::array()}};
  return out;
}

DeployOutcome Deployer::Finish(DeployOutcome out, Verdict verdict, std::string reason) {
  out.verdict = verdict;
  out.reason = std::move(reason);
  out.finished_after = clock_.Now() - began_;
  out.record["verdict"] = std::string(VerdictName(verdict));
  out.record["reason"] = out.reason;
  out.record["state"] = "done";
  out.record["finished_at_ms"] = ToUnixMillis(clock_.SystemNow());
  out.record["decided_after_s"] = Seconds(out.decided_after);
  out.record["rollback_s"] = Seconds(out.rollback_took);
  Save(out);
  return out;
}

Result<std::vector<Deployer::Old>> Deployer::Inventory(DeployOutcome& out, const DeploySpec& spec,
                                                       std::vector<int>& others) {
  std::vector<Old> old;
  std::set<std::string> old_versions;
  std::vector<std::string> old_ids;
  others.assign(hosts_.size(), 0);
  for (std::size_t h = 0; h < hosts_.size(); ++h) {
    auto listed = hosts_[h].platform->List("");
    if (!listed.ok()) {
      // Unreachable stays UNAVAILABLE: the deploy says it could not reach, not that it was told no.
      return Status(listed.status().code() == StatusCode::kUnavailable
                        ? StatusCode::kUnavailable
                        : StatusCode::kFailedPrecondition,
                    "cannot list " + spec.service + " on the platform" +
                        (hosts_.size() == 1 ? "" : " of " + hosts_[h].name) + ": " +
                        listed.status().message());
    }
    for (InstanceInfo& i : *listed) {
      if (i.spec.service != spec.service) {
        ++others[h];
        continue;
      }
      if (i.spec.version == spec.version) {
        return FailedPreconditionError("version " + spec.version + " of " + spec.service +
                                       " is already deployed (instance " + Where(i.spec.id, h) +
                                       ")");
      }
      old_ids.push_back(i.spec.id);
      old_versions.insert(i.spec.version);
      old.push_back(Old{i.spec.id, h, std::move(i.spec)});
    }
  }
  out.record["previous"] = {{"versions", old_versions}, {"instances", old_ids}};
  return old;
}

Result<Plan> Deployer::MakePlan(DeployOutcome& out, const DeploySpec& spec, const Budget& budget,
                                const std::vector<int>& others, Progress& progress) {
  std::vector<PlacementHost> placement;
  for (std::size_t h = 0; h < hosts_.size(); ++h) {
    // Old instances of this service go during the deploy: they do not count against capacity.
    placement.push_back({hosts_[h].name, hosts_[h].zone, hosts_[h].capacity, others[h]});
  }
  DROVER_ASSIGN_OR_RETURN(const std::vector<std::size_t> new_hosts,
                          Place(placement, spec.instances));
  std::vector<std::size_t> old_hosts;
  for (const Old& o : progress.old) old_hosts.push_back(o.host);
  Plan plan = PlanBatches(new_hosts, old_hosts, budget);
  for (std::size_t n = 0; n < new_hosts.size(); ++n) {
    progress.fresh.push_back(Fresh{LaunchOf(spec, n + 1).id, new_hosts[n]});
  }
  json batches = json::array();
  for (std::size_t k = 0; k < plan.batches.size(); ++k) {
    json items = json::array();
    for (const BatchItem& i : plan.batches[k].items) {
      json item = json::object();
      if (i.fresh) {
        item["new"] = progress.fresh[*i.fresh].id;
        item["host"] = hosts_[progress.fresh[*i.fresh].host].name;
      }
      if (i.old) {
        item["old"] = progress.old[*i.old].id;
        item["old_host"] = hosts_[progress.old[*i.old].host].name;
      }
      items.push_back(std::move(item));
    }
    batches.push_back({{"index", k + 1},
                       {"canary", plan.batches[k].canary},
                       {"stop_first", plan.batches[k].stop_first},
                       {"items", std::move(items)},
                       {"verdict", "pending"}});
  }
  json placed = json::array(), old = json::array(), removals = json::array();
  for (const Fresh& f : progress.fresh) {
    placed.push_back({{"id", f.id}, {"host", hosts_[f.host].name}});
  }
  for (const Old& o : progress.old) {
    old.push_back(
        {{"id", o.id}, {"host", hosts_[o.host].name}, {"launch", LaunchSpecToJson(o.launch)}});
  }
  for (const std::size_t o : plan.removals) removals.push_back(progress.old[o].id);
  out.record["placement"] = std::move(placed);
  out.record["old"] = std::move(old);
  out.record["removals"] = std::move(removals);
  out.record["strategy"] = {{"max_surge", spec.max_surge.ToString()},
                            {"max_unavailable", spec.max_unavailable.ToString()},
                            {"canary", spec.canary ? spec.canary->ToString() : "0"},
                            {"surge", budget.surge},
                            {"unavailable", budget.unavailable},
                            {"batch", budget.batch()}};
  out.record["batches"] = std::move(batches);
  return plan;
}

bool Deployer::StopInstances(DeployOutcome& out, const DeploySpec& spec,
                             const Instances& instances) {
  // Drain first: DRAINING in the registry, so gateways and clients send no new sessions, and
  // one drain_delay for that to reach them all.
  bool marked_any = false;
  for (const auto& [id, host] : instances) {
    if (!drain_) break;
    auto marked = drain_(spec.service, id);
    if (!marked.ok()) {
      Note(out, "could not mark " + Where(id, host) + " DRAINING: " + marked.status().message());
    } else if (*marked) {
      Note(out, "draining " + Where(id, host));
      marked_any = true;
    }
  }
  if (marked_any) clock_.SleepFor(spec.drain_delay, {});
  bool all = true;
  for (const auto& [id, host] : instances) {
    // The platform may be briefly unreachable: an instance left running is worse than a slow
    // step, so a failed stop is tried again, up to three times.
    Status stopped;
    for (int attempt = 1; attempt <= 3; ++attempt) {
      stopped = hosts_[host].platform->Stop(id, spec.stop_grace);
      if (stopped.ok() || stopped.code() == StatusCode::kNotFound) break;
      Note(out, "stopping " + Where(id, host) + " (attempt " + std::to_string(attempt) +
                    "): " + stopped.message());
      if (attempt < 3) clock_.SleepFor(std::chrono::seconds(attempt), {});
    }
    if (!stopped.ok() && stopped.code() != StatusCode::kNotFound) {
      out.left_running.push_back(id);
      out.record["left_running"] = out.left_running;
      all = false;
      continue;  // it may still run: its registry entry stays its own
    }
    Note(out, "stopped " + Where(id, host));
    if (!deregister_) continue;
    auto removed = deregister_(spec.service, id);
    if (!removed.ok()) {
      Note(out, "could not remove " + id + "'s registry entry: " + removed.status().message());
    } else if (*removed) {
      Note(out, "removed the registry entry " + id + " left behind");
    }
  }
  return all;
}

std::optional<std::string> Deployer::StartBatch(DeployOutcome& out, const DeploySpec& spec,
                                                const std::vector<std::size_t>& fresh,
                                                Progress& progress) {
  for (const std::size_t f : fresh) {
    const Fresh& target = progress.fresh[f];
    LaunchSpec launch = LaunchOf(spec, f + 1);
    Status s = hosts_[target.host].platform->Start(launch);
    if (s.code() == StatusCode::kAlreadyExists && resuming_) {
      // Started by the controller this one took over from: the id is this deploy's own.
      Note(out, Where(target.id, target.host) + " runs already (started before the takeover)");
      s = Status::Ok();
    }
    if (!s.ok()) {
      const std::string why =
          "could not start " + Where(target.id, target.host) + ": " + s.message();
      Note(out, why);
      // Whatever did start goes again -- this one too, unless it certainly did not start (a
      // timeout may hide a start that happened; a refusal -- a bad spec, no right, a program the
      // host cannot run -- does not) or is someone else's.
      if (s.code() != StatusCode::kAlreadyExists && s.code() != StatusCode::kInvalidArgument &&
          s.code() != StatusCode::kPermissionDenied && s.code() != StatusCode::kUnauthenticated &&
          s.code() != StatusCode::kFailedPrecondition) {
        progress.started.push_back(f);
      }
      return why;
    }
    if (std::find(progress.started.begin(), progress.started.end(), f) == progress.started.end()) {
      progress.started.push_back(f);
    }
    // Recorded as it happens: if this controller dies now, the record names what runs.
    RecordProgress(out, progress);
    Save(out);
  }
  return std::nullopt;
}

std::vector<Observation> Deployer::Observe(const DeploySpec& spec, const std::vector<Fresh>& batch,
                                           std::string& data_error,
                                           std::map<std::size_t, MonoTime>& unreachable_since,
                                           std::optional<std::string>& host_down) {
  std::set<std::size_t> batch_hosts;
  for (const Fresh& f : batch) batch_hosts.insert(f.host);
  std::map<std::size_t, std::vector<InstanceInfo>> listed;
  data_error.clear();
  const MonoTime now = clock_.Now();
  for (const std::size_t h : batch_hosts) {
    auto list = hosts_[h].platform->List(spec.service);
    if (list.ok()) {
      unreachable_since.erase(h);
      listed[h] = std::move(*list);
      continue;
    }
    data_error =
        (hosts_.size() == 1 ? "platform: " : hosts_[h].name + ": ") + list.status().message();
    const MonoTime since = unreachable_since.emplace(h, now).first->second;
    if (now - since >= spec.host_timeout) {
      host_down = "host " + hosts_[h].name + " unreachable for " +
                  std::to_string(static_cast<int>(Seconds(now - since))) +
                  " s: " + list.status().message();
    }
  }
  auto ready = readiness_(spec.service);
  if (!ready.ok()) {
    data_error = "registry: " + ready.status().message();
    return {};
  }
  std::vector<Observation> seen;
  for (const Fresh& f : batch) {
    auto on_host = listed.find(f.host);
    if (on_host == listed.end()) continue;  // no data for it this time
    Observation o;
    o.id = f.id;
    for (InstanceInfo& i : on_host->second) {
      if (i.spec.id == f.id) o.platform = std::move(i);
    }
    auto r = ready->find(f.id);
    o.ready = r != ready->end() && r->second;
    seen.push_back(std::move(o));
  }
  return seen;
}

GateResult Deployer::Gate(DeployOutcome& out, const DeploySpec& spec,
                          const std::vector<Fresh>& batch, MonoTime began, std::stop_token stop) {
  std::vector<std::string> ids;
  for (const Fresh& f : batch) ids.push_back(f.id);
  HealthGate gate(ids, began, spec.gate);
  GateResult verdict;
  std::string last_wait, data_error, noted_error;
  std::map<std::size_t, MonoTime> unreachable_since;
  while (verdict.verdict == Verdict::kPending) {
    if (stop.stop_requested()) {
      verdict = GateResult{Verdict::kFail, "deploy interrupted"};
      break;
    }
    std::optional<std::string> host_down;
    const std::vector<Observation> seen =
        Observe(spec, batch, data_error, unreachable_since, host_down);
    if (!data_error.empty() && data_error != noted_error) {
      Note(out, "no data this time: " + data_error);
      noted_error = data_error;
    }
    if (host_down) {
      verdict = GateResult{Verdict::kFail, *host_down};
      break;
    }
    if (Requested(out) == "abort") {
      verdict = GateResult{Verdict::kFail, "aborted (drover rollout abort)"};
      break;
    }
    Renew(out);
    if (taken_over_) {
      verdict = GateResult{Verdict::kFail, *taken_over_};
      break;
    }
    verdict = gate.Observe(clock_.Now(), seen);
    if (verdict.verdict == Verdict::kPending && gate.waiting_for() != last_wait) {
      last_wait = gate.waiting_for();
      Note(out, "waiting for " + last_wait);
    }
    if (verdict.verdict == Verdict::kPending) clock_.SleepFor(spec.poll, stop);
  }
  out.decided_after = clock_.Now() - began_;
  if (verdict.verdict == Verdict::kFail && !noted_error.empty() &&
      verdict.reason.find("data") != std::string::npos) {
    verdict.reason += " (last error: " + noted_error + ")";
  }
  return verdict;
}

std::optional<std::string> Deployer::RunBatch(DeployOutcome& out, const DeploySpec& spec,
                                              std::size_t index, const Batch& batch,
                                              Progress& progress, std::stop_token stop) {
  const MonoTime began = clock_.Now();
  json& record = out.record["batches"][index];
  record["started_at_ms"] = ToUnixMillis(clock_.SystemNow());
  const std::string name = std::string(batch.canary ? "canary " : "") + "batch " +
                           std::to_string(index + 1) + "/" +
                           std::to_string(out.record["batches"].size());
  // 1. The old instances the surge leaves no room for; 2. the new ones.
  Instances first, after;
  std::vector<std::size_t> fresh, old_after;
  for (const BatchItem& item : batch.items) {
    if (item.fresh) fresh.push_back(*item.fresh);
    if (!item.old) continue;
    const Old& o = progress.old[*item.old];
    if (first.size() < batch.stop_first) {
      first.emplace_back(o.id, o.host);
      if (std::find(progress.stopped_old.begin(), progress.stopped_old.end(), *item.old) ==
          progress.stopped_old.end()) {
        progress.stopped_old.push_back(*item.old);
      }
    } else {
      after.emplace_back(o.id, o.host);
      old_after.push_back(*item.old);
    }
  }
  Note(out, name + " began: " + std::to_string(fresh.size()) + " new, " +
                std::to_string(first.size() + after.size()) + " old to replace");
  RecordProgress(out, progress);
  Save(out);  // before the stops: a successor knows they may have happened
  if (taken_over_) return *taken_over_;
  if (!first.empty()) StopInstances(out, spec, first);
  if (auto why = StartBatch(out, spec, fresh, progress)) {
    record["verdict"] = "fail";
    return name + ": " + *why;
  }
  // 3. The gate, on this batch's new instances.
  std::vector<Fresh> members;
  for (const std::size_t f : fresh) members.push_back(progress.fresh[f]);
  const GateResult verdict = Gate(out, spec, members, began, stop);
  record["gate"] = verdict.reason;
  record["gated_after_s"] = Seconds(clock_.Now() - began);
  if (verdict.verdict != Verdict::kPass) {
    record["verdict"] = "fail";
    return name + ": " + verdict.reason;
  }
  Note(out, name + " passed: " + verdict.reason);
  // 4. The rest of its old instances.
  if (taken_over_) return *taken_over_;
  progress.stopped_old.insert(progress.stopped_old.end(), old_after.begin(), old_after.end());
  RecordProgress(out, progress);
  Save(out);
  if (!after.empty()) StopInstances(out, spec, after);
  record["verdict"] = "pass";
  record["finished_after_s"] = Seconds(clock_.Now() - began);
  record["finished_at_ms"] = ToUnixMillis(clock_.SystemNow());
  Save(out);
  return std::nullopt;
}

std::string Deployer::Requested(DeployOutcome& out) {
  if (!control_) return "";
  std::string request = control_(out.id);
  if (request != last_request_) {
    if (!request.empty()) Note(out, "asked to " + request + " (drover rollout " + request + ")");
    last_request_ = request;
  }
  return request;
}

std::optional<std::string> Deployer::BetweenBatches(DeployOutcome& out, const DeploySpec& spec,
                                                    bool after_canary, std::stop_token stop) {
  const MonoTime canary_until = clock_.Now() + spec.canary_pause;
  std::string state = "running";
  while (true) {
    if (stop.stop_requested()) return "deploy interrupted";
    const std::string request = Requested(out);
    if (request == "abort") return "aborted (drover rollout abort)";
    const bool canary_wait = after_canary && request != "promote" &&
                             (spec.canary_pause == Duration::zero() || clock_.Now() < canary_until);
    const std::string now =
        request == "pause" ? "paused"
        : canary_wait
            ? "canary passed, waiting for promote" +
                  std::string(spec.canary_pause > Duration::zero() ? " or its pause to end" : "")
            : "running";
    if (now != state) {
      Note(out, now == "running" ? "going on" : now);
      out.record["state"] = now;
      Save(out);
      state = now;
    }
    if (now == "running") return std::nullopt;
    Renew(out);
    if (taken_over_) return *taken_over_;
    clock_.SleepFor(spec.poll, stop);
  }
}

void Deployer::RestoreOld(DeployOutcome& out, const DeploySpec& spec, const Progress& progress) {
  if (progress.stopped_old.empty()) {
    Note(out, std::to_string(progress.old.size()) +
                  " old instance(s) kept serving throughout: none was stopped");
    return;
  }
  std::vector<std::string> waiting;
  for (const std::size_t o : progress.stopped_old) {
    const Old& old = progress.old[o];
    const Status s = hosts_[old.host].platform->Start(old.launch);
    if (s.ok() || s.code() == StatusCode::kAlreadyExists) {
      Note(out, "starting old instance " + Where(old.id, old.host) + " again");
      waiting.push_back(old.id);
    } else {
      Note(out,
           "could not start old instance " + Where(old.id, old.host) + " again: " + s.message());
    }
  }
  // The new instances stay until the old ones serve again, or until the progress deadline.
  const MonoTime deadline = clock_.Now() + spec.gate.progress_deadline;
  while (!waiting.empty()) {
    if (auto ready = readiness_(spec.service); ready.ok()) {
      std::erase_if(waiting, [&](const std::string& id) {
        auto r = ready->find(id);
        return r != ready->end() && r->second;
      });
    }
    if (waiting.empty()) break;
    if (clock_.Now() >= deadline) {
      Note(out, "old instance(s) " + Join(waiting) + " not READY again by the progress " +
                    "deadline; stopping the new ones anyway");
      return;
    }
    Renew(out);
    clock_.SleepFor(spec.poll, {});
  }
  Note(out, "the stopped old instances are READY again");
}

void Deployer::Revert(DeployOutcome& out, const DeploySpec& spec, Progress& progress) {
  const MonoTime revert = clock_.Now();
  RestoreOld(out, spec, progress);
  Instances fresh;
  for (auto f = progress.started.rbegin(); f != progress.started.rend(); ++f) {
    fresh.emplace_back(progress.fresh[*f].id, progress.fresh[*f].host);
  }
  const std::size_t left_before = out.left_running.size();
  StopInstances(out, spec, fresh);
  out.rollback_took = clock_.Now() - revert;
  if (out.left_running.size() == left_before) {
    Note(out, "reverted: the new instances are stopped; " + spec.service + " runs its old version");
  } else {
    Note(out, "REVERT INCOMPLETE: could not stop " + Join(out.left_running) +
                  "; stop them by hand (drover agent API: DELETE /v1/instances/<id>)");
  }
}

DeployOutcome Deployer::Run(const DeploySpec& spec, std::stop_token stop, std::string owner) {
  owner_ = std::move(owner);
  lease_ = spec.controller_lease;
  DeployOutcome out = Begin(spec);
  // Until the first batch starts, a failure has changed nothing.
  out.nothing_changed = true;
  const Result<Budget> budget = CheckedBudget(spec);  // as ValidateDeploySpec
  if (!budget.ok()) return Finish(std::move(out), Verdict::kFail, budget.status().message());
  Progress progress;
  std::vector<int> others;
  auto old = Inventory(out, spec, others);
  if (!old.ok()) {
    out.unreachable = old.status().code() == StatusCode::kUnavailable;
    return Finish(std::move(out), Verdict::kFail, old.status().message());
  }
  progress.old = std::move(*old);
  auto plan = MakePlan(out, spec, *budget, others, progress);
  if (!plan.ok()) return Finish(std::move(out), Verdict::kFail, plan.status().message());
  // The first record takes the service's running-deploy marker: a second deploy stops here. A
  // deploy that cannot be recorded could not be resumed either: it does not start.
  if (log_) {
    if (Status first = log_(out.id, out.record); !first.ok()) {
      out.reason = first.code() == StatusCode::kFailedPrecondition
                       ? first.message()
                       : "cannot record the deploy: " + first.message();
      out.unreachable = first.code() == StatusCode::kUnavailable;
      out.record["verdict"] = "fail";
      out.record["reason"] = out.reason;
      spdlog::warn("deploy {}: refused: {}", out.id, out.reason);
      return out;
    }
  }
  Note(out, "deploy of " + spec.service + " " + spec.version +
                " began: " + std::to_string(spec.instances) + " new instance(s) over " +
                std::to_string(hosts_.size()) + " host(s) in " +
                std::to_string(plan->batches.size()) + " batch(es) (surge " +
                std::to_string(budget->surge) + ", unavailable " +
                std::to_string(budget->unavailable) + "); " + std::to_string(progress.old.size()) +
                " old instance(s) keep serving");
  out.record["state"] = "running";
  Save(out);
  out.nothing_changed = false;
  return Drive(std::move(out), spec, *plan, progress, 0, stop);
}

DeployOutcome Deployer::Resume(const json& record, std::stop_token stop, std::string owner) {
  owner_ = std::move(owner);
  resuming_ = true;
  began_ = clock_.Now();
  DeployOutcome out;
  out.id = record.value("id", "");
  out.record = record;
  auto spec = DeploySpecFromJson(record.value("spec", json::object()));
  if (!spec.ok()) return Finish(std::move(out), Verdict::kFail, spec.status().message());
  lease_ = spec->controller_lease;
  Progress progress;
  auto plan = Restore(record, progress);
  if (!plan.ok()) return Finish(std::move(out), Verdict::kFail, plan.status().message());
  Note(out, "resumed by " + (owner_.empty() ? std::string("another controller") : owner_));
  Save(out);
  if (taken_over_) return out;
  if (record.value("verdict", "") == "fail") {
    // Decided already: only the revert is left to finish.
    const std::string reason = record.value("reason", "");
    Revert(out, *spec, progress);
    return Finish(std::move(out), Verdict::kFail, reason);
  }
  std::size_t first = 0;
  while (first < plan->batches.size() &&
         out.record["batches"][first].value("verdict", "") == "pass") {
    ++first;
  }
  return Drive(std::move(out), *spec, *plan, progress, first, stop);
}

DeployOutcome Deployer::Drive(DeployOutcome out, const DeploySpec& spec, const Plan& plan,
                              Progress& progress, std::size_t first, std::stop_token stop) {
  std::optional<std::string> failed;
  std::string passed;
  for (std::size_t k = first; k < plan.batches.size() && !failed; ++k) {
    failed = RunBatch(out, spec, k, plan.batches[k], progress, stop);
    if (failed && stop.stop_requested()) failed = "deploy interrupted";
    if (failed) break;
    passed = out.record["batches"][k].value("gate", "");
    if (k + 1 < plan.batches.size()) {
      failed = BetweenBatches(out, spec, plan.batches[k].canary, stop);
    }
  }
  if (taken_over_) {
    // Another controller runs the deploy now: this one touches nothing more.
    spdlog::warn("deploy {}: {}; this controller stops", out.id, *taken_over_);
    out.reason = *taken_over_;
    return out;
  }
  out.record["state"] = "finishing";
  if (failed) {
    // Nothing started and nothing stopped (the first start refused: a program the host cannot
    // run, a spec it refuses): the revert has nothing to do. An interrupt is a failure of its
    // own, whatever it caught.
    out.nothing_changed =
        progress.started.empty() && progress.stopped_old.empty() && !stop.stop_requested();
    Note(out, "FAILED: " + *failed + "; reverting");
    out.record["verdict"] = "fail";
    out.record["reason"] = *failed;
    Save(out);
    Revert(out, spec, progress);
    return Finish(std::move(out), Verdict::kFail, *failed);
  }
  const std::string reason = std::to_string(plan.batches.size()) + " batch(es) passed; " + passed;
  Note(out, "PASSED: " + reason);
  out.record["verdict"] = "pass";
  out.record["reason"] = reason;
  Save(out);
  Instances removals;
  for (const std::size_t o : plan.removals) {
    removals.emplace_back(progress.old[o].id, progress.old[o].host);
  }
  if (!removals.empty()) StopInstances(out, spec, removals);
  if (out.left_running.empty()) {
    Note(out, "done: " + spec.service + " runs " + spec.version);
  } else {
    Note(out, "done, but old instance(s) " + Join(out.left_running) +
                  " could not be stopped; stop them by hand");
  }
  return Finish(std::move(out), Verdict::kPass, reason);
}

Result<Plan> Deployer::Restore(const json& record, Progress& progress) {
  std::map<std::string, std::size_t> host_index;
  for (std::size_t h = 0; h < hosts_.size(); ++h) host_index[hosts_[h].name] = h;
  const auto host_of = [&](const json& j) -> Result<std::size_t> {
    const std::string name = j.value("host", "");
    auto it = host_index.find(name);
    if (it == host_index.end()) {
      return FailedPreconditionError("host " + name + " of the deploy is not among its agents");
    }
    return it->second;
  };
  std::map<std::string, std::size_t> fresh_index, old_index;
  for (const json& p : record.value("placement", json::array())) {
    DROVER_ASSIGN_OR_RETURN(const std::size_t h, host_of(p));
    fresh_index[p.value("id", "")] = progress.fresh.size();
    progress.fresh.push_back(Fresh{p.value("id", ""), h});
  }
  for (const json& o : record.value("old", json::array())) {
    DROVER_ASSIGN_OR_RETURN(const std::size_t h, host_of(o));
    DROVER_ASSIGN_OR_RETURN(LaunchSpec launch, LaunchSpecFromJson(o.value("launch", json())));
    old_index[o.value("id", "")] = progress.old.size();
    progress.old.push_back(Old{o.value("id", ""), h, std::move(launch)});
  }
  const auto index_of = [](const std::map<std::string, std::size_t>& index,
                           const std::string& id) -> std::optional<std::size_t> {
    auto it = index.find(id);
    return it == index.end() ? std::nullopt : std::optional<std::size_t>(it->second);
  };
  for (const json& id : record.value("new_instances", json::array())) {
    if (auto f = index_of(fresh_index, id.get<std::string>())) progress.started.push_back(*f);
  }
  for (const json& id : record.value("stopped_old", json::array())) {
    if (auto o = index_of(old_index, id.get<std::string>())) progress.stopped_old.push_back(*o);
  }
  Plan plan;
  for (const json& b : record.value("batches", json::array())) {
    Batch batch;
    batch.canary = b.value("canary", false);
    batch.stop_first = b.value("stop_first", std::size_t{0});
    for (const json& item : b.value("items", json::array())) {
      BatchItem i;
      if (item.contains("new")) i.fresh = index_of(fresh_index, item.value("new", ""));
      if (item.contains("old")) i.old = index_of(old_index, item.value("old", ""));
      batch.items.push_back(i);
    }
    plan.batches.push_back(std::move(batch));
  }
  for (const json& id : record.value("removals", json::array())) {
    if (auto o = index_of(old_index, id.get<std::string>())) plan.removals.push_back(*o);
  }
  return plan;
}

}  // namespace drover::rollout
