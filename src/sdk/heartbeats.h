// Heartbeats: one thread that runs every periodic task of the hosts in a process (SDK-3).
//
// - One owned thread, joined by Stop() (and the destructor); nothing is detached.
// - Stop() and Remove() wake the thread at once: nobody sleeps through a shutdown.
// - A task that throws is caught, logged and counted (failures()); the thread keeps going.
// - A task whose `enabled()` says false (a host that is not ready) is skipped, not run.
// - After Remove(id) returns, that task never runs again and is not running: its owner may be
//   destroyed.
// Time comes from the injected Clock, so tests drive hours of beats with a FakeClock.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <stop_token>
#include <string>
#include <thread>

#include "drover/clock.h"
#include "drover/mutex.h"

namespace drover::sdk {

class Heartbeats {
 public:
  explicit Heartbeats(Clock& clock);
  ~Heartbeats();
  Heartbeats(const Heartbeats&) = delete;
  Heartbeats& operator=(const Heartbeats&) = delete;

  // Runs `beat` every `interval`, first one `interval` from now, while `enabled()` (if given)
  // says so. Returns the id for Remove().
  std::uint64_t Add(std::string name, Duration interval, std::function<void()> beat,
                    std::function<bool()> enabled = {});
  // Runs task `id` within `within` from now, unless it is due sooner already; then on its
  // interval again. For a beat that failed and wants a retry sooner than its interval (it may
  // call this from inside the beat). An unknown id is ignored.
  void Hasten(std::uint64_t id, Duration within);
  // Waits for a running beat of this task to finish, then forgets it. Idempotent.
  void Remove(std::uint64_t id);
  // Ends the thread (at once, even mid-sleep) and joins it. Idempotent.
  void Stop();

  std::uint64_t beats() const { return beats_.load(); }
  std::uint64_t failures() const { return failures_.load(); }

 private:
  struct Task {
    std::string name;
    Duration interval;
    std::function<void()> beat;
    std::function<bool()> enabled;
    MonoTime due;
  };

  void Run(std::stop_token stop);
  void Wake() DROVER_REQUIRES(mu_);

  Clock& clock_;
  Mutex mu_;
  CondVar idle_;  // a beat finished
  std::map<std::uint64_t, Task> tasks_ DROVER_GUARDED_BY(mu_);
  std::uint64_t next_id_ DROVER_GUARDED_BY(mu_) = 1;
  std::uint64_t running_ DROVER_GUARDED_BY(mu_) = 0;  // id of the beat in progress, 0: none
  std::stop_source sleep_ DROVER_GUARDED_BY(mu_);     // stops the current sleep
  std::atomic<std::uint64_t> beats_{0};
  std::atomic<std::uint64_t> failures_{0};
  std::jthread thread_;
};

}  // namespace drover::sdk
