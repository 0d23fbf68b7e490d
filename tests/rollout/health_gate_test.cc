// The health gate on simulated platforms and a FakeClock (RO-2, seed 004).
#include "rollout/health_gate.h"

#include <gtest/gtest.h>

#include <deque>

namespace drover::rollout {
namespace {

using namespace std::chrono_literals;

// One simulated instance: boots, is READY `warmup` after each boot, crashes `crash_after` after
// each boot (if set; only on the first `crashing_boots` boots), restarts after an exponential
// back-off, gives up after more than `max_restarts` crashes, and keeps the newest 5 events.
struct SimInstance {
  std::string id;
  Duration warmup = 1s;
  std::optional<Duration> crash_after;
  int crashing_boots = 1'000'000;
  int max_restarts = 5;
  std::optional<Duration> never_ready;  // set: never READY

  InstanceStatus status = InstanceStatus::kStarting;
  MonoTime booted{};
  MonoTime next_boot{};
  int boots = 0;
  int crashes = 0;
  std::deque<InstanceEvent> events;

  void Event(const FakeClock& clock, EventKind kind, std::string detail) {
    events.push_back(InstanceEvent{kind, clock.SystemNow(), std::move(detail)});
    while (events.size() > 5) events.pop_front();
  }

  void Step(const FakeClock& clock) {
    const MonoTime now = clock.Now();
    if (status == InstanceStatus::kStarting && now >= next_boot) {
      status = InstanceStatus::kRunning;
      booted = now;
      ++boots;
      Event(clock, EventKind::kStarted, "boot " + std::to_string(boots));
    }
    if (status == InstanceStatus::kRunning && crash_after && boots <= crashing_boots &&
        now - booted >= *crash_after) {
      ++crashes;
      Event(clock, EventKind::kCrashed, "exited with code 1");
      if (crashes > max_restarts) {
        Event(clock, EventKind::kGaveUp, "gave up after " + std::to_string(crashes) + " crashes");
        status = InstanceStatus::kGaveUp;
        return;
      }
      status = InstanceStatus::kStarting;
      next_boot = now + 200ms * (1 << std::min(crashes - 1, 5));
    }
  }

  Observation Observe(const FakeClock& clock) const {
    Observation o;
    o.id = id;
    InstanceInfo info;
    info.spec.id = id;
    info.status = status;
    info.events.assign(events.begin(), events.end());
    o.platform = info;
    o.ready = status == InstanceStatus::kRunning && !never_ready && clock.Now() - booted >= warmup;
    return o;
  }
};

struct Outcome {
  GateResult result;
  Duration after{};
};

// Runs the gate over `instances`, in 100 ms steps, until a verdict (or 10 simulated minutes).
Outcome RunGate(std::vector<SimInstance> instances, GateOptions options) {
  FakeClock clock;
  std::vector<std::string> ids;
  for (const auto& i : instances) ids.push_back(i.id);
  const MonoTime began = clock.Now();
  HealthGate gate(ids, began, options);
  for (int step = 0; step < 6000; ++step) {
    std::vector<Observation> seen;
    for (auto& i : instances) {
      i.Step(clock);
      seen.push_back(i.Observe(clock));
    }
    const GateResult r = gate.Observe(clock.Now(), seen);
    if (r.verdict != Verdict::kPending) return {r, clock.Now() - began};
    clock.Advance(100ms);
  }
  return {GateResult{}, clock.Now() - began};
}

SimInstance Healthy(std::string id) {
  SimInstance i;
  i.id = std::move(id);
  return i;
}

SimInstance CrashingAt(std::string id, Duration after) {
  SimInstance i = Healthy(std::move(id));
  i.crash_after = after;
  return i;
}

const GateOptions kOptions{/*min_healthy=*/15s, /*check_delay=*/5s, /*progress_deadline=*/120s};

struct Pattern {
  const char* name;
  SimInstance instance;
  Verdict want;
  const char* reason_has;
};

TEST(HealthGateTest, CrashPatternsOnAFakeClock) {
  SimInstance gives_up = CrashingAt("zone-2", 2s);
  gives_up.max_restarts = 2;
  SimInstance never_gives_up = CrashingAt("zone-2", 2500ms);
  never_gives_up.max_restarts = 1'000'000;
  SimInstance never_ready = Healthy("zone-2");
  never_ready.never_ready = 1s;
  SimInstance crashed_once = CrashingAt("zone-2", 500ms);
  crashed_once.crashing_boots = 1;
  const std::vector<Pattern> patterns = {
      {"crash at boot", CrashingAt("zone-2", 0s), Verdict::kFail, "still restarting"},
      {"crash at 0.5 s", CrashingAt("zone-2", 500ms), Verdict::kFail, "gave up"},
      {"crash at 2.5 s", CrashingAt("zone-2", 2500ms), Verdict::kFail, "zone-2"},
      {"crash after READY at 8 s", CrashingAt("zone-2", 8s), Verdict::kFail, "zone-2"},
      {"intermittent every 20 s", CrashingAt("zone-2", 20s), Verdict::kFail, "zone-2"},
      {"give-up after 2 restarts", gives_up, Verdict::kFail, "gave up"},
      {"crash at 2.5 s, never given up", never_gives_up, Verdict::kFail, "still restarting"},
      {"never READY", never_ready, Verdict::kFail, "progress deadline"},
      {"one crash at boot, then healthy", crashed_once, Verdict::kPass, "not since check 1"},
      {"healthy", Healthy("zone-2"), Verdict::kPass, "no crash since deploy began"},
  };
  for (const Pattern& p : patterns) {
    SCOPED_TRACE(p.name);
    const Outcome out = RunGate({Healthy("zone-1"), p.instance}, kOptions);
    EXPECT_EQ(out.result.verdict, p.want) << out.result.reason;
    EXPECT_NE(out.result.reason.find(p.reason_has), std::string::npos) << out.result.reason;
    // Never a verdict before the instances could have been READY for min_healthy -- unless the
    // platform gave up.
    if (out.result.verdict == Verdict::kPass) {
      EXPECT_GE(out.after, kOptions.min_healthy);
    }
    std::printf("%-34s %s after %.1f s: %s\n", p.name, VerdictName(out.result.verdict).data(),
                std::chrono::duration<double>(out.after).count(), out.result.reason.c_str());
  }
}

// Seed 004: every check sees one more crash and one more start, and the platform keeps only the
// newest 5 events. A count of crashes in that list stops growing once it is full -- that is how
// the crash loop passed -- but the latest crash's timestamp keeps moving, and the gate fails.
TEST(HealthGateTest, ABoundedEventListThatKeepsFillingFailsTheGate) {
  FakeClock clock;
  const MonoTime began = clock.Now();
  HealthGate gate({"api-1"}, began, GateOptions{10s, 5s, 120s});
  std::deque<InstanceEvent> list;
  std::vector<std::size_t> crash_counts;
  GateResult r;
  for (int i = 0; i < 200 && r.verdict == Verdict::kPending; ++i) {
    list.push_back({EventKind::kCrashed, clock.SystemNow(), "exited with code 1"});
    list.push_back({EventKind::kStarted, clock.SystemNow(), "restarted"});
    while (list.size() > 5) list.pop_front();
    crash_counts.push_back(static_cast<std::size_t>(
        std::count_if(list.begin(), list.end(),
                      [](const InstanceEvent& e) { return e.kind == EventKind::kCrashed; })));
    Observation o;
    o.id = "api-1";
    o.platform = InstanceInfo{};
    o.platform->status = InstanceStatus::kRunning;
    o.platform->events.assign(list.begin(), list.end());
    o.ready = true;  // it answers between crashes, as the incident's API did
    r = gate.Observe(clock.Now(), {o});
    clock.Advance(1s);
  }
  EXPECT_EQ(r.verdict, Verdict::kFail);
  EXPECT_NE(r.reason.find("api-1 crashed repeatedly since deploy began and is still restarting"),
            std::string::npos)
      << r.reason;
  // The premise: the count in the list had long stopped growing.
  ASSERT_GE(crash_counts.size(), 4u);
  EXPECT_EQ(crash_counts[crash_counts.size() - 1], crash_counts[crash_counts.size() - 2]);
  EXPECT_EQ(crash_counts[2], crash_counts.back());
}

TEST(HealthGateTest, NoDataIsAFailureNotAPass) {
  FakeClock clock;
  HealthGate gate({"a", "b"}, clock.Now(), GateOptions{1s, 1s, 30s});
  GateResult r;
  for (int i = 0; i < 40 && r.verdict == Verdict::kPending; ++i) {
    // Only "a" is ever seen: never a full observation.
    Observation a;
    a.id = "a";
    a.platform = InstanceInfo{};
    a.platform->status = InstanceStatus::kRunning;
    a.ready = true;
    r = gate.Observe(clock.Now(), {a});
    clock.Advance(1s);
  }
  EXPECT_EQ(r.verdict, Verdict::kFail);
  EXPECT_NE(r.reason.find("no data to judge"), std::string::npos) << r.reason;
  HealthGate empty({}, clock.Now(), GateOptions{});
  EXPECT_EQ(empty.Observe(clock.Now(), {}).verdict, Verdict::kFail);
}

// A crashed process stays READY in the registry until its lease runs out; the gate believes the
// registry only while the platform says the process runs, so a dead instance's stale READY
// neither starts nor continues its healthy time.
TEST(HealthGateTest, AStaleReadyOfADeadProcessDoesNotCount) {
  FakeClock clock;
  HealthGate gate({"a"}, clock.Now(), GateOptions{3s, 1s, 60s});
  Observation o;
  o.id = "a";
  o.platform = InstanceInfo{};
  o.platform->status = InstanceStatus::kStarting;  // waiting out a restart back-off
  o.ready = true;                                  // the registry has not noticed yet
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(gate.Observe(clock.Now(), {o}).verdict, Verdict::kPending);
    clock.Advance(1s);
  }
  EXPECT_NE(gate.waiting_for().find("a to be READY (STARTING, READY"), std::string::npos)
      << gate.waiting_for();
  o.platform->status = InstanceStatus::kRunning;
  GateResult r;
  for (int i = 0; i < 10 && r.verdict == Verdict::kPending; ++i) {
    r = gate.Observe(clock.Now(), {o});
    clock.Advance(1s);
  }
  EXPECT_EQ(r.verdict, Verdict::kPass) << r.reason;
}

TEST(HealthGateTest, AnInstanceThatVanishesFails) {
  FakeClock clock;
  HealthGate gate({"a"}, clock.Now(), GateOptions{});
  Observation gone;
  gone.id = "a";
  const GateResult r = gate.Observe(clock.Now(), {gone});
  EXPECT_EQ(r.verdict, Verdict::kFail);
  EXPECT_NE(r.reason.find("vanished"), std::string::npos);
  // And the verdict stays.
  EXPECT_EQ(gate.Observe(clock.Now(), {}).verdict, Verdict::kFail);
}

// An instance the platform could not start at all (its exec refused for good) fails the gate
// at once, saying so rather than "crashed repeatedly".
TEST(HealthGateTest, AnInstanceThatCouldNotBeStartedFailsWithTheReason) {
  FakeClock clock;
  HealthGate gate({"a"}, clock.Now(), GateOptions{});
  Observation o;
  o.id = "a";
  o.platform = InstanceInfo{};
  o.platform->status = InstanceStatus::kGaveUp;
  o.platform->events = {
      {EventKind::kCrashed, clock.SystemNow(), "cannot run /opt/zone: No such file or directory"},
      {EventKind::kGaveUp, clock.SystemNow(), "cannot run /opt/zone: No such file or directory"}};
  const GateResult r = gate.Observe(clock.Now(), {o});
  EXPECT_EQ(r.verdict, Verdict::kFail);
  EXPECT_EQ(r.reason,
            "instance a could not be started: cannot run /opt/zone: No such file or directory");
}

}  // namespace
}  // namespace drover::rollout
