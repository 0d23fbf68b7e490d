// Shutdown signals, read in one place.
//
// A process that stops on SIGINT/SIGTERM blocks them in main() before it starts any thread (every
// thread inherits the mask, so the kernel delivers them to no thread at random), then either
// waits for one where it should stop (the daemons: WaitForSignal) or has a SignalWatcher thread
// act on them while main() works (`drover demo`, `drover deploy`: the first signal asks the work
// to stop and wind down in order; a second one gives up).
#pragma once

#include <signal.h>

#include <chrono>
#include <functional>
#include <initializer_list>
#include <stop_token>
#include <thread>

namespace drover {

// SIGINT, SIGTERM and `extra`.
sigset_t ShutdownSignals(std::initializer_list<int> extra = {});

// Blocks ShutdownSignals(extra) in the calling thread and returns that set. Call before any
// thread starts.
sigset_t BlockShutdownSignals(std::initializer_list<int> extra = {});

// Waits until one signal of `signals` (blocked in every thread) arrives; returns its number.
int WaitForSignal(const sigset_t& signals);
// As above for at most `timeout`; 0 when none arrived by then.
int WaitForSignal(const sigset_t& signals, std::chrono::milliseconds timeout);

// A thread that reads blocked shutdown signals: the first one requests stop on stop_token() and
// calls `on_first(signal)`; every later one calls `on_again(signal)` (a forced exit, typically).
// The callbacks run on the watcher's thread. The destructor stops and joins it. Not copyable.
class SignalWatcher {
 public:
  SignalWatcher(const sigset_t& signals, std::function<void(int)> on_first,
                std::function<void(int)> on_again);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Stop is requested once the first signal arrived.
  std::stop_token stop_token() const { return interrupt_.get_token(); }

 private:
  void Run(std::stop_token done);

  const sigset_t signals_;
  const std::function<void(int)> on_first_;
  const std::function<void(int)> on_again_;
  std::stop_source interrupt_;
  std::jthread thread_;  // last: started once everything it reads exists
};

}  // namespace drover
