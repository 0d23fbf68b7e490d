// Deployer: the deploy controller (RO-2, RO-3, RO-4). A surge-style rollout of one service to a
// new version on a Platform, judged by the HealthGate against the registry's readiness.
//
//   1. Start the new version's instances next to the old ones (ids <service>-<version>-<n>;
//      the platform fills "{port}", "{health_port}" and "{host}" on the host that runs each
//      (host_ports.h), and "{id}", "{service}", "{version}" with the instance's own).
//   2. Observe every `poll`: the platform's view of each new instance plus READY/accepting in the
//      registry, fed to the HealthGate until it passes or fails.
//   3. Pass: stop the old instances one at a time (each gets SIGTERM and runs the SDK's ordered
//      shutdown -- leave discovery, drain, then close its listener), newest version READY all
//      along. Fail: stop the new instances; the old ones were never touched, so the service
//      never has zero READY instances. After each stop, a registry entry the instance left
//      behind (it crashed, or was killed after its grace) is deregistered.
// Every step is appended to the deploy record, which is written through the DeployLog at the
// start, on the verdict and at the end (persisted by the agent).
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <vector>

#include "drover/clock.h"
#include "rollout/health_gate.h"
#include "rollout/platform.h"

namespace drover::rollout {

struct DeploySpec {
  std::string service;
  std::string version;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  int instances = 1;
  GateOptions gate;
  Duration stop_grace = std::chrono::seconds(15);
  Duration poll = std::chrono::milliseconds(250);
};

// Where readiness comes from: instance id -> READY and accepting, for one service (the
// registry's List). An error means "no data this time".
using ReadinessSource =
    std::function<Result<std::map<std::string, bool>>(const std::string& service)>;
// Removes what the registry still holds for a stopped instance (a crashed process cannot
// deregister itself; its entry would stay READY until its lease ran out). True when an entry was
// removed; false when there was none.
using Deregister = std::function<Result<bool>(const std::string& service, const std::string& id)>;
// Where deploy records go (the agent's PUT /v1/deploys/{id}). Failures are logged, not fatal.
using DeployLog = std::function<Status(const std::string& id, const nlohmann::json& record)>;

struct DeployOutcome {
  Verdict verdict = Verdict::kFail;
  std::string reason;
  std::string id;             // the deploy record's id
  Duration decided_after{};   // from the start of the deploy to the verdict
  Duration finished_after{};  // to the end (old stopped, or rollback done)
  Duration rollback_took{};   // stopping the new instances after a failure
  // Instances the deploy meant to stop but could not (the platform kept refusing): after a
  // failure, new ones still running; after a pass, old ones. Empty when everything went.
  std::vector<std::string> left_running;
  nlohmann::json record;
};

class Deployer {
 public:
  // Everything must outlive the deployer.
  Deployer(Platform& platform, ReadinessSource readiness, DeployLog log, Clock& clock,
           Deregister deregister = {})
      : platform_(platform),
        readiness_(std::move(readiness)),
        log_(std::move(log)),
        deregister_(std::move(deregister)),
        clock_(clock) {}

  // Runs one deploy to its end. `stop` (Ctrl-C) fails the deploy and rolls back.
  DeployOutcome Run(const DeploySpec& spec, std::stop_token stop = {});

 private:
  void Note(DeployOutcome& out, const std::string& what);
  void Save(DeployOutcome& out);
  // Stops one instance (three tries) and clears what the registry still holds for it; false
  // (and the id in out.left_running) when it could not be stopped.
  bool StopInstance(DeployOutcome& out, const DeploySpec& spec, const std::string& id);
  void RollBack(DeployOutcome& out, const DeploySpec& spec, const std::vector<std::string>& new_ids,
                std::size_t old_count);

  // The steps of Run(). Begin() starts the deploy record and the clock; Finish() writes the
  // verdict into it, saves it and returns it.
  DeployOutcome Begin(const DeploySpec& spec);
  DeployOutcome Finish(DeployOutcome out, Verdict verdict, std::string reason);
  // The ids of the instances running now (recorded as "previous"), or why the deploy cannot go
  // on: the platform cannot list them, or this version runs already.
  Result<std::vector<std::string>> OldInstances(DeployOutcome& out, const DeploySpec& spec);
  // Starts the new instances; when one cannot start, rolls back what did and returns why.
  Result<std::vector<std::string>> StartNew(DeployOutcome& out, const DeploySpec& spec,
                                            std::size_t old_count);
  // Observes the new instances until the gate decides or `stop`; sets out.decided_after.
  GateResult Gate(DeployOutcome& out, const DeploySpec& spec,
                  const std::vector<std::string>& new_ids, std::stop_token stop);
  // One observation of the new instances; none when the platform or the registry has no data
  // this time (`data_error` keeps the latest such error, noted when it changes).
  std::vector<Observation> ObserveNew(DeployOutcome& out, const DeploySpec& spec,
                                      const std::vector<std::string>& new_ids,
                                      std::string& data_error);
  // After a pass: stops the old instances one at a time and notes how that went.
  void RetireOld(DeployOutcome& out, const DeploySpec& spec,
                 const std::vector<std::string>& old_ids);

  Platform& platform_;
  ReadinessSource readiness_;
  DeployLog log_;
  Deregister deregister_;
  Clock& clock_;
  MonoTime began_{};
};

}  // namespace drover::rollout
