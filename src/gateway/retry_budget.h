// RetryBudget: bounds retries by the load they would add. A retry may start while the retries in
// flight stay below max(min, percent x active requests) -- so when an upstream fails wholesale,
// retries add at most `percent` more load instead of multiplying it, and a quiet listener can
// still retry `min` requests at once. Thread-safe, lock-free.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace drover::gateway {

class RetryBudget {
 public:
  RetryBudget(double percent, int min) : percent_(percent), min_(min) {}

  void RequestStarted() { requests_.fetch_add(1, std::memory_order_relaxed); }
  void RequestEnded() { requests_.fetch_sub(1, std::memory_order_relaxed); }

  // Takes a retry slot; false when the budget is spent. A taken slot is given back by RetryEnded.
  bool TryStartRetry() {
    std::int64_t in_flight = retries_.load(std::memory_order_relaxed);
    while (true) {
      if (in_flight >= Allowed()) return false;
      if (retries_.compare_exchange_weak(in_flight, in_flight + 1, std::memory_order_relaxed)) {
        return true;
      }
    }
  }
  void RetryEnded() { retries_.fetch_sub(1, std::memory_order_relaxed); }

  std::int64_t Allowed() const {
    const auto by_load = static_cast<std::int64_t>(
        static_cast<double>(requests_.load(std::memory_order_relaxed)) * percent_ / 100);
    return std::max<std::int64_t>(min_, by_load);
  }
  std::int64_t requests() const { return requests_.load(std::memory_order_relaxed); }

  // A request counted as active for as long as this lives.
  class Request {
   public:
    explicit Request(RetryBudget& budget) : budget_(budget) { budget_.RequestStarted(); }
    ~Request() { budget_.RequestEnded(); }
    Request(const Request&) = delete;
    Request& operator=(const Request&) = delete;

   private:
    RetryBudget& budget_;
  };

  // A retry slot: held from a Take() that succeeded until Release() or the end of this object.
  class Retry {
   public:
    explicit Retry(RetryBudget& budget) : budget_(budget) {}
    ~Retry() { Release(); }
    Retry(const Retry&) = delete;
    Retry& operator=(const Retry&) = delete;
    // False when the budget is spent. One slot at most: a second Take keeps the one held.
    bool Take() {
      if (!held_) held_ = budget_.TryStartRetry();
      return held_;
    }
    void Release() {
      if (held_) budget_.RetryEnded();
      held_ = false;
    }
    bool held() const { return held_; }

   private:
    RetryBudget& budget_;
    bool held_ = false;
  };
  std::int64_t retries_in_flight() const { return retries_.load(std::memory_order_relaxed); }

 private:
  const double percent_;
  const std::int64_t min_;
  std::atomic<std::int64_t> requests_{0};
  std::atomic<std::int64_t> retries_{0};
};

}  // namespace drover::gateway
