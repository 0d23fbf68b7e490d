#include "drover/clock.h"

namespace drover {

bool RealClock::SleepUntil(MonoTime deadline, std::stop_token stop) {
  std::unique_lock lock(mu_);
  // The predicate is only ever satisfied by a stop request; wait_until returns false then.
  cv_.wait_until(lock, stop, deadline, [] { return false; });
  return MonoClock::now() >= deadline;
}

FakeClock::FakeClock()
    : now_(MonoTime(std::chrono::hours(24 * 365))),
      system_now_(SystemTime(std::chrono::seconds(1'800'000'000))) {}

MonoTime FakeClock::Now() const {
  std::lock_guard lock(mu_);
  return now_;
}

SystemTime FakeClock::SystemNow() const {
  std::lock_guard lock(mu_);
  return system_now_;
}

bool FakeClock::SleepUntil(MonoTime deadline, std::stop_token stop) {
  std::unique_lock lock(mu_);
  ++sleepers_;
  cv_.notify_all();  // AwaitSleepers watches the count
  const bool reached = cv_.wait(lock, stop, [&] { return now_ >= deadline; });
  --sleepers_;
  return reached;
}

void FakeClock::Advance(Duration d) {
  if (d < Duration::zero()) d = Duration::zero();
  {
    std::lock_guard lock(mu_);
    now_ += d;
    system_now_ += std::chrono::duration_cast<SystemTime::duration>(d);
  }
  cv_.notify_all();
}

std::size_t FakeClock::sleepers() const {
  std::lock_guard lock(mu_);
  return sleepers_;
}

bool FakeClock::AwaitSleepers(std::size_t n, std::chrono::milliseconds real_timeout) {
  std::unique_lock lock(mu_);
  // condition_variable_any::wait_until with a steady_clock deadline is a real-time wait.
  return cv_.wait_until(lock, MonoClock::now() + real_timeout, [&] { return sleepers_ >= n; });
}

}  // namespace drover
