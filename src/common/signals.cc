#include "common/signals.h"

#include <pthread.h>

#include <ctime>

#include "common/thread_name.h"

namespace drover {

sigset_t ShutdownSignals(std::initializer_list<int> extra) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  for (const int s : extra) sigaddset(&signals, s);
  return signals;
}

sigset_t BlockShutdownSignals(std::initializer_list<int> extra) {
  const sigset_t signals = ShutdownSignals(extra);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

int WaitForSignal(const sigset_t& signals) {
  int signal_number = 0;
  while (sigwait(&signals, &signal_number) != 0) {
  }
  return signal_number;
}

int WaitForSignal(const sigset_t& signals, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    const timespec wait{static_cast<time_t>(left.count() / 1'000'000'000),
                        static_cast<long>(left.count() % 1'000'000'000)};
    const int signal_number = sigtimedwait(&signals, nullptr, &wait);
    if (signal_number > 0) return signal_number;  // else a timeout, or EINTR: look again
  }
}

SignalWatcher::SignalWatcher(const sigset_t& signals, std::function<void(int)> on_first,
                             std::function<void(int)> on_again)
    : signals_(signals),
      on_first_(std::move(on_first)),
      on_again_(std::move(on_again)),
      thread_([this](std::stop_token done) {
        NameThisThread("signals");
        Run(done);
      }) {}

SignalWatcher::~SignalWatcher() {
  thread_.request_stop();
  thread_.join();
}

void SignalWatcher::Run(std::stop_token done) {
  // sigtimedwait rather than sigwait: the thread must notice the destructor's stop request.
  const timespec tick{0, 100'000'000};
  while (!done.stop_requested()) {
    const int signal_number = sigtimedwait(&signals_, nullptr, &tick);
    if (signal_number <= 0) continue;
    if (!interrupt_.stop_requested()) {
      interrupt_.request_stop();
      if (on_first_) on_first_(signal_number);
      continue;
    }
    if (on_again_) on_again_(signal_number);
  }
}

}  // namespace drover
