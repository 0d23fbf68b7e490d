// Deployer: the deploy controller (RO-2, RO-3, RO-4). Rolls one service to a new version over
// the hosts of a fleet (each a Platform: a `drover agent`), in batches, each judged by the
// HealthGate against the registry's readiness.
//
//   1. Inventory: every host lists its instances; the service's are the old ones (a host that
//      cannot be listed, or the new version already running, stops the deploy before anything
//      changes). Placement and batches come from strategy.h: new instances spread over zones and
//      hosts, each paired with an old one on its host.
//   2. Each batch: stop max(0, k - surge) of its old instances, start its new ones (ids
//      <service>-<version>-<n>; the host fills "{port}", "{health_port}" and "{host}"), observe
//      them every `poll` -- the platform's view on their hosts plus READY/accepting in the
//      registry -- until the gate passes or fails, then stop the rest of its old instances.
//      The canary batch (if any) goes first; after it passes the deploy waits `canary_pause`, or
//      without one, until promoted (`drover rollout promote`).
//   3. Stopping an instance drains it first: DRAINING in the registry (gateways and clients stop
//      sending new sessions), `drain_delay` for that to propagate, then the platform's stop
//      (SIGTERM: the SDK's ordered shutdown; SIGKILL after `stop_grace`), and the registry
//      entry it left behind (a crash, a kill) is deregistered at its generation.
//   4. Fail (a batch's gate, a start, an unreachable host, or `stop`): revert. The old instances
//      already stopped are started again (their recorded launch, on their host) and must be
//      READY -- up to the progress deadline -- before the new ones are stopped, newest first. The
//      service is never left with neither version serving.
// The READY-and-accepting count never drops below instances - max_unavailable while old
// instances remain (strategy_test replays every plan shape). Every step is appended to the deploy
// record, saved through the DeployLog as it goes: a controller that dies mid-deploy leaves a record
// naming what it started and stopped.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "drover/clock.h"
#include "rollout/health_gate.h"
#include "rollout/platform.h"
#include "rollout/strategy.h"

namespace drover::rollout {

struct DeploySpec {
  std::string service;
  std::string version;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  int instances = 1;
  Amount max_surge{25, true};
  Amount max_unavailable{0, false};
  std::optional<Amount> canary;
  Duration canary_pause{};  // after the canary batch passed
  GateOptions gate;         // per batch
  Duration stop_grace = std::chrono::seconds(15);
  Duration drain_delay = std::chrono::seconds(2);  // DRAINING in the registry, then the stop
  Duration poll = std::chrono::milliseconds(250);
  // A host whose platform cannot be reached this long while it runs a batch fails the deploy.
  Duration host_timeout = std::chrono::seconds(10);
  // The controller renews its claim on the deploy in the record (every third of this); another
  // may take the deploy over (Resume) once it has lapsed.
  Duration controller_lease = std::chrono::seconds(10);
};

// INVALID_ARGUMENT when the spec could never deploy: names and command as an agent would refuse
// them, fewer than one instance, a surge/unavailable/canary budget that replaces nothing, or gate
// timings that cannot judge. `drover deploy` asks before anything runs; the deployer asks again,
// since a spec also comes from a stored record or the library.
Status ValidateDeploySpec(const DeploySpec& spec);

// The spec as the deploy record keeps it (durations in ms), for a controller that resumes it.
nlohmann::json DeploySpecToJson(const DeploySpec& spec);
Result<DeploySpec> DeploySpecFromJson(const nlohmann::json& j);

// A host of the fleet: its platform and what placement needs to know of it.
struct DeployHost {
  std::string name;     // for the record and the log ("agent-127.0.0.3-7080")
  std::string address;  // how a resuming controller reaches it (the agent's URL); may be empty
  std::string zone;
  int capacity = 0;  // instances it accepts in all; 0: no limit
  Platform* platform = nullptr;
};

// Where readiness comes from: instance id -> READY and accepting, for one service (the
// registry's List). An error means "no data this time".
using ReadinessSource =
    std::function<Result<std::map<std::string, bool>>(const std::string& service)>;
// Removes what the registry still holds for a stopped instance (a crashed process cannot
// deregister itself; its entry would stay READY until its lease ran out). True when an entry was
// removed; false when there was none.
using Deregister = std::function<Result<bool>(const std::string& service, const std::string& id)>;
// Marks an instance DRAINING in the registry before it is stopped. True when it was marked;
// false when the registry does not hold it (nothing to wait for).
using MarkDraining = std::function<Result<bool>(const std::string& service, const std::string& id)>;
// What `drover rollout` asks of this deploy now: "pause", "resume", "abort", "promote", or ""
// for nothing. Polled at every observation and between batches; an error counts as "".
using ControlSource = std::function<std::string(const std::string& deploy_id)>;
// Where deploy records go. The first write must succeed (a deploy that cannot be recorded could
// not be resumed; FAILED_PRECONDITION: another deploy of the service runs): otherwise nothing
// starts. Later failures are logged, not fatal -- except ABORTED with "taken over" in its
// message: another controller now runs the deploy, and this one stops at once, touching nothing
// more.
using DeployLog = std::function<Status(const std::string& id, const nlohmann::json& record)>;

struct DeployOutcome {
  Verdict verdict = Verdict::kFail;
  std::string reason;
  std::string id;             // the deploy record's id
  Duration decided_after{};   // from the start of the deploy to the verdict
  Duration finished_after{};  // to the end (old stopped, or revert done)
  Duration rollback_took{};   // the revert after a failure
  // Instances the deploy meant to stop but could not (the platform kept refusing): after a
  // failure, new ones still running; after a pass, old ones. Empty when everything went.
  std::vector<std::string> left_running;
  // A failure before any instance was started or stopped: nothing changed, the old version
  // serves as it did. `unreachable` too when that was because an agent or the registry could not
  // be reached (else one refused, or the request cannot work).
  bool nothing_changed = false;
  bool unreachable = false;
  nlohmann::json record;
};

class Deployer {
 public:
  // Everything must outlive the deployer; every host's platform too.
  Deployer(std::vector<DeployHost> hosts, ReadinessSource readiness, DeployLog log, Clock& clock,
           Deregister deregister = {}, MarkDraining drain = {});
  // One host.
  Deployer(Platform& platform, ReadinessSource readiness, DeployLog log, Clock& clock,
           Deregister deregister = {}, MarkDraining drain = {})
      : Deployer({DeployHost{"local", "", "", 0, &platform}}, std::move(readiness), std::move(log),
                 clock, std::move(deregister), std::move(drain)) {}

  // Control requests: "abort" fails the deploy and reverts it; "pause" holds it after the batch
  // running now (until "resume"); "promote" ends the wait after the canary batch, which without
  // a canary_pause lasts until promoted.
  void set_control(ControlSource control) { control_ = std::move(control); }

  // Runs one deploy to its end. `stop` (Ctrl-C) fails the deploy and reverts it. `owner` names
  // this controller in the record ("host:pid").
  DeployOutcome Run(const DeploySpec& spec, std::stop_token stop = {}, std::string owner = "");

  // Takes over the deploy `record` describes (as the registry keeps it) from a controller that
  // died, and brings it to an end from where it stands: a decided failure is reverted again; a
  // running deploy re-runs its first unfinished batch -- stopping what it had not stopped yet,
  // starting what it had not started (an instance already running is this deploy's own) and
  // gating it afresh -- then goes on. The hosts must include every host the record names.
  DeployOutcome Resume(const nlohmann::json& record, std::stop_token stop, std::string owner);

 private:
  struct Old {
    std::string id;
    std::size_t host = 0;
    LaunchSpec launch;  // as the host recorded it: what a revert starts again
  };
  struct Fresh {
    std::string id;
    std::size_t host = 0;
  };
  struct Progress;  // what this run has started and stopped so far

  void Note(DeployOutcome& out, const std::string& what);
  void Save(DeployOutcome& out);
  std::string Where(const std::string& id, std::size_t host) const;

  // The steps of Run(). Begin() starts the record and the clock; Finish() writes the verdict
  // into it, saves it and returns it.
  DeployOutcome Begin(const DeploySpec& spec);
  DeployOutcome Finish(DeployOutcome out, Verdict verdict, std::string reason);
  // The old instances on every host, or why the deploy cannot go on; `others` gets the number of
  // other services' instances per host.
  Result<std::vector<Old>> Inventory(DeployOutcome& out, const DeploySpec& spec,
                                     std::vector<int>& others);
  // The new instances with their hosts (into progress.fresh), and the batches.
  Result<Plan> MakePlan(DeployOutcome& out, const DeploySpec& spec, const Budget& budget,
                        const std::vector<int>& others, Progress& progress);
  // One batch to its end; the failure's reason, or nullopt when it passed.
  std::optional<std::string> RunBatch(DeployOutcome& out, const DeploySpec& spec, std::size_t index,
                                      const Batch& batch, Progress& progress, std::stop_token stop);
  // Starts the batch's new instances; why one could not start, or nullopt.
  std::optional<std::string> StartBatch(DeployOutcome& out, const DeploySpec& spec,
                                        const std::vector<std::size_t>& fresh, Progress& progress);
  // Observes the batch's new instances until the gate decides, `stop`, or a host is unreachable
  // for longer than host_timeout; sets out.decided_after.
  GateResult Gate(DeployOutcome& out, const DeploySpec& spec, const std::vector<Fresh>& batch,
                  MonoTime began, std::stop_token stop);
  // One observation of `batch`; none when a platform or the registry has no data this time
  // (`data_error` gets why; `unreachable_since` tracks each host that could not be listed).
  std::vector<Observation> Observe(const DeploySpec& spec, const std::vector<Fresh>& batch,
                                   std::string& data_error,
                                   std::map<std::size_t, MonoTime>& unreachable_since,
                                   std::optional<std::string>& host_down);
  // Drains the instances (DRAINING, then one drain_delay for all), stops each (three tries) and
  // clears what the registry still holds for it; false when one could not be stopped (its id is
  // then in out.left_running).
  bool StopInstances(DeployOutcome& out, const DeploySpec& spec,
                     const std::vector<std::pair<std::string, std::size_t>>& instances);
  // Run() and Resume() after the progress is known: the batches from `first`, then the end.
  DeployOutcome Drive(DeployOutcome out, const DeploySpec& spec, const Plan& plan,
                      Progress& progress, std::size_t first, std::stop_token stop);
  // Rebuilds the plan and the progress a record describes.
  Result<Plan> Restore(const nlohmann::json& record, Progress& progress);
  // The record's view of the progress: new instances started, old ones stopped.
  void RecordProgress(DeployOutcome& out, const Progress& progress);
  // Saves when the controller's claim needs renewing (a third of the lease has passed).
  void Renew(DeployOutcome& out);
  // The control request now (noted when it changes).
  std::string Requested(DeployOutcome& out);
  // Between batches: holds while paused, and after a canary until promoted or its pause is over;
  // why the deploy must stop (abort, interrupt), or nullopt to go on.
  std::optional<std::string> BetweenBatches(DeployOutcome& out, const DeploySpec& spec,
                                            bool after_canary, std::stop_token stop);
  // After a failure: the old instances back, READY, then the new ones stopped.
  void Revert(DeployOutcome& out, const DeploySpec& spec, Progress& progress);
  // Starts the stopped old instances again and waits (up to the progress deadline) until each
  // is READY; notes the ones that are not.
  void RestoreOld(DeployOutcome& out, const DeploySpec& spec, const Progress& progress);

  std::vector<DeployHost> hosts_;
  ReadinessSource readiness_;
  DeployLog log_;
  Deregister deregister_;
  MarkDraining drain_;
  ControlSource control_;
  std::string last_request_;
  Clock& clock_;
  MonoTime began_{};
  MonoTime saved_{};
  std::string owner_;
  Duration lease_ = std::chrono::seconds(10);
  bool resuming_ = false;
  std::optional<std::string> taken_over_;  // set when another controller runs the deploy now
};

}  // namespace drover::rollout
