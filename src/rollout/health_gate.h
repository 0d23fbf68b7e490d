// HealthGate: does a new version pass? (RO-2, seed 004). Pure logic over what the deploy
// controller observes -- the platform's view of each new instance (status and its bounded event
// list) and the registry's (READY and accepting) -- and a monotonic clock, so it is tested with
// simulated platforms on a FakeClock.
//
// Started is not serving. The gate passes only after:
//   1. every new instance READY in the registry and RUNNING on the platform, continuously, for
//      `min_healthy`;
//   2. check 1, then check 2 `check_delay` later: every instance still READY. With no crash since
//      the deploy began, that is a pass. Otherwise check 3 another `check_delay` later. A check
//      fails when the timestamp of the latest crash since the deploy began moved since the
//      previous check -- the timestamp, never a count: counting crashes in a list that keeps the
//      newest five stops growing once the list is full, which is how seed 004's crash loop passed.
// While the gate waits for step 1, a crash watch compares the latest crash timestamps every
// `check_delay` the same way: an instance that had crashed at one watch and crashed again by the
// next is crash-looping, and the gate fails then -- a loop whose every life is shorter than
// `min_healthy` never reaches the checks, and must not wait for the progress deadline or for the
// platform to give up. A single crash (a dependency not up yet at boot) is allowed.
// It fails at once when an instance gave up restarting or vanished from the platform, and when
// the `progress_deadline` passes before a verdict -- including when there was never data to
// judge by ("no checks" is a failure, not a pass). The latest crash seen is kept per instance
// across observations, so a crash pushed out of the bounded list is not forgotten.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "drover/clock.h"
#include "rollout/platform.h"

namespace drover::rollout {

struct GateOptions {
  Duration min_healthy = std::chrono::seconds(10);
  Duration check_delay = std::chrono::seconds(5);
  Duration progress_deadline = std::chrono::seconds(120);
};

// One new instance at one moment.
struct Observation {
  std::string id;
  std::optional<InstanceInfo> platform;  // nullopt: the platform does not know it (any more)
  bool ready = false;                    // READY and accepting in the registry
};

// Timings the gate can judge by: check_delay > 0, min_healthy >= check_delay (the crash watch
// looks at least once before the checks) and a progress deadline beyond min_healthy + 2 checks.
Status ValidateGateOptions(const GateOptions& options);

enum class Verdict : std::uint8_t { kPending = 0, kPass = 1, kFail = 2 };
std::string_view VerdictName(Verdict verdict);  // "pending", "pass", "fail"

struct GateResult {
  Verdict verdict = Verdict::kPending;
  std::string reason;  // for pass and fail: what the gate saw, for the deploy record
};

class HealthGate {
 public:
  // `instances`: ids of the new version's instances, fresh for this deploy (so every event they
  // have happened during it: no filter on event timestamps, whose clock is the platform's and may
  // be skewed against ours); `began`: when the deploy began, on the controller's monotonic clock.
  HealthGate(std::vector<std::string> instances, MonoTime began, GateOptions options);

  // Feeds one observation of every new instance (`seen` empty or missing some: no data this
  // time) and returns the verdict so far. Once it is pass or fail, it stays.
  GateResult Observe(MonoTime now, const std::vector<Observation>& seen);

  // What the gate is waiting for, for progress logs ("waiting for zone-2 to be READY").
  const std::string& waiting_for() const { return waiting_for_; }

 private:
  GateResult Fail(std::string reason);
  GateResult Pass(std::string reason);
  std::string Describe(const Observation& o) const;
  // The first instance whose latest crash is newer than in `before` (with `new_counts`, also one
  // that had no crash in `before`), or "".
  std::string CrashMovedSince(const std::map<std::string, SystemTime>& before,
                              bool new_counts) const;

  // The steps of Observe(). Record() and WatchCrashes() return why the gate fails, if it does.
  using ById = std::map<std::string, const Observation*>;
  // Takes in one observation of instance `id`: its crashes and whether it is READY and running.
  std::optional<std::string> Record(MonoTime now, const std::string& id, const Observation& o);
  // The crash watch while waiting for min_healthy: looks every check_delay.
  std::optional<std::string> WatchCrashes(MonoTime now);
  // Whether every instance has been READY for min_healthy; if not, says which one is waited for.
  bool HealthyLongEnough(MonoTime now, const ById& by_id);
  // One of the checks after min_healthy: the verdict, or pending until the next one.
  GateResult Check(MonoTime now, const ById& by_id);

  const std::vector<std::string> instances_;
  const MonoTime began_mono_;
  const GateOptions options_;

  GateResult result_;
  std::string waiting_for_ = "the first observation";
  bool any_data_ = false;
  std::map<std::string, MonoTime> ready_since_;     // seen READY continuously since
  std::map<std::string, SystemTime> latest_crash_;  // since the deploy began, the newest seen
  int checks_done_ = 0;
  MonoTime next_check_{};
  std::map<std::string, SystemTime> crash_at_last_check_;
  MonoTime next_watch_{};  // crash watch while waiting for min_healthy
  std::map<std::string, SystemTime> crash_at_last_watch_;
};

}  // namespace drover::rollout
