// Clock: the one source of time for every piece of Drover logic that decides on time.
//
// Monotonic time (MonoTime) measures intervals: leases, slow start, deadlines. System time
// (SystemTime) is only for display and for timestamps that cross process boundaries.
// RealClock reads the OS clocks; FakeClock is driven by tests. Both are thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stop_token>
#include <vector>

#include "drover/mutex.h"

namespace drover {

using MonoClock = std::chrono::steady_clock;
using MonoTime = MonoClock::time_point;
using SystemTime = std::chrono::system_clock::time_point;
using Duration = std::chrono::nanoseconds;

// Wall-clock times cross process boundaries (stores, JSON, protobuf) as Unix milliseconds.
inline std::int64_t ToUnixMillis(SystemTime t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
inline SystemTime FromUnixMillis(std::int64_t ms) {
  return SystemTime(
      std::chrono::duration_cast<SystemTime::duration>(std::chrono::milliseconds(ms)));
}

class Clock {
 public:
  virtual ~Clock() = default;

  virtual MonoTime Now() const = 0;
  virtual SystemTime SystemNow() const = 0;

  // Blocks the calling thread until Now() >= deadline or a stop is requested on `stop`.
  // Returns whether the deadline has passed: true when it was reached (even if a stop was also
  // requested), false when the stop came first. Both clocks follow this rule.
  virtual bool SleepUntil(MonoTime deadline, std::stop_token stop) = 0;

  bool SleepFor(Duration d, std::stop_token stop) { return SleepUntil(Now() + d, std::move(stop)); }
};

// The operating system's clocks. Stateless apart from the wait primitive; cheap to create.
class RealClock final : public Clock {
 public:
  MonoTime Now() const override { return MonoClock::now(); }
  SystemTime SystemNow() const override { return std::chrono::system_clock::now(); }
  bool SleepUntil(MonoTime deadline, std::stop_token stop) override;

 private:
  Mutex mu_;
  CondVar cv_;  // only woken by stop requests
};

// A clock that moves only when told to. Threads blocked in SleepUntil wake when Advance() moves
// time past their deadline, or when their stop token fires.
class FakeClock final : public Clock {
 public:
  // Starts at an arbitrary but fixed point well away from the epoch, so that "time since"
  // arithmetic in tests never underflows.
  FakeClock();

  MonoTime Now() const override;
  SystemTime SystemNow() const override;
  bool SleepUntil(MonoTime deadline, std::stop_token stop) override;

  // Moves both clocks forward by d (d >= 0) and wakes sleepers whose deadline has passed.
  void Advance(Duration d);

  // Number of threads currently blocked in SleepUntil.
  std::size_t sleepers() const;

  // Test helper: waits (in real time, up to `real_timeout`) until at least n threads sleep on
  // this clock with a deadline still ahead (a sleeper that Advance() made due is not counted
  // until it sleeps again). Returns false on timeout. Lets a test advance time only once a
  // worker is parked, and know that what the last Advance() made due has run.
  bool AwaitSleepers(std::size_t n, std::chrono::milliseconds real_timeout);

 private:
  mutable Mutex mu_;
  CondVar cv_;  // waited on with mu_: time moved, sleeper count changed
  MonoTime now_ DROVER_GUARDED_BY(mu_);
  SystemTime system_now_ DROVER_GUARDED_BY(mu_);
  std::vector<MonoTime> deadlines_ DROVER_GUARDED_BY(mu_);  // one per sleeper
};

}  // namespace drover
