// Waiting on a condition in tests: bounded in real time, never a bare sleep.
#pragma once

#include <chrono>
#include <thread>

namespace drover::testing {

// Polls `done()` every `poll` until it holds (true) or `timeout` passes (false).
template <typename Pred>
bool Eventually(Pred done, std::chrono::milliseconds timeout = std::chrono::seconds(10),
                std::chrono::milliseconds poll = std::chrono::milliseconds(1)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace drover::testing
