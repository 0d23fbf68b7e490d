#include "drover/clock.h"

#include <algorithm>

namespace drover {

bool RealClock::SleepUntil(MonoTime deadline, std::stop_token stop) {
  MutexLock lock(mu_);
  // The predicate is only ever satisfied by a stop request; wait_until returns false then.
  cv_.WaitUntil(mu_, stop, deadline, [] { return false; });
  return MonoClock::now() >= deadline;
}

FakeClock::FakeClock()
    : now_(MonoTime(std::chrono::hours(24 * 365))),
      system_now_(SystemTime(std::chrono::seconds(1'800'000'000))) {}

MonoTime FakeClock::Now() const {
  MutexLock lock(mu_);
  return now_;
}

SystemTime FakeClock::SystemNow() const {
  MutexLock lock(mu_);
  return system_now_;
}

bool FakeClock::SleepUntil(MonoTime deadline, std::stop_token stop) {
  MutexLock lock(mu_);
  deadlines_.push_back(deadline);
  cv_.NotifyAll();  // AwaitSleepers watches the sleepers
  const bool reached = cv_.Wait(mu_, stop, [&]() DROVER_REQUIRES(mu_) { return now_ >= deadline; });
  deadlines_.erase(std::find(deadlines_.begin(), deadlines_.end(), deadline));
  cv_.NotifyAll();
  return reached;
}

void FakeClock::Advance(Duration d) {
  if (d < Duration::zero()) d = Duration::zero();
  {
    MutexLock lock(mu_);
    now_ += d;
    system_now_ += std::chrono::duration_cast<SystemTime::duration>(d);
  }
  cv_.NotifyAll();
}

std::size_t FakeClock::sleepers() const {
  MutexLock lock(mu_);
  return deadlines_.size();
}

bool FakeClock::AwaitSleepers(std::size_t n, std::chrono::milliseconds real_timeout) {
  MutexLock lock(mu_);
  // condition_variable_any::wait_until with a steady_clock deadline is a real-time wait.
  return cv_.WaitUntil(mu_, MonoClock::now() + real_timeout, [&]() DROVER_REQUIRES(mu_) {
    const MonoTime now = now_;
    const auto parked =
        std::count_if(deadlines_.begin(), deadlines_.end(), [now](MonoTime d) { return d > now; });
    return static_cast<std::size_t>(parked) >= n;
  });
}

}  // namespace drover
