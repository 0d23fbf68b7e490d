// Published<T>: how a single writer hands immutable values (the router's snapshots) to any number
// of data-path readers. A Published holds one reference to the current value; every Load() gives
// the reader a reference of its own, so a value lives until the last reader that loaded it lets
// go, however many newer values are stored meanwhile. Published is thread-safe; its Reader is
// per-thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>

#include "drover/mutex.h"

namespace drover::router {

// One writer publishes immutable values; many readers load them. Thread-safe.
//
// The shared_ptr lives behind a one-bit spin lock held only for a pointer copy (Load) or a pointer
// swap (Store) -- never while a value is built or destroyed -- so a reader waits at most for one
// pointer swap, never for a writer's work. This is the design of libstdc++'s
// std::atomic<std::shared_ptr>, whose GCC 12 load() releases its lock with relaxed ordering (a data
// race under the C++ memory model, reported by ThreadSanitizer); here both sides release. The
// thread safety analysis cannot take an atomic_flag for a lock, so to it the Published itself is
// the capability that Lock() and Unlock() take and release, and that guards value_.
template <typename T>
class DROVER_CAPABILITY("spin lock") Published {
 public:
  Published() = default;
  explicit Published(std::shared_ptr<const T> initial) : value_(std::move(initial)) {}
  Published(const Published&) = delete;
  Published& operator=(const Published&) = delete;

  std::shared_ptr<const T> Load() const {
    Lock();
    std::shared_ptr<const T> copy = value_;
    Unlock();
    return copy;
  }

  void Store(std::shared_ptr<const T> value) {
    Lock();
    value_.swap(value);
    version_.fetch_add(1, std::memory_order_release);
    Unlock();
    // `value` now holds the previous snapshot; if this was its last reference it is destroyed
    // here, outside the lock.
  }

  // A per-thread view for hot loops: Current() reloads only when a new value was published, so
  // in the steady state a read is one atomic load of a counter that only the writer writes -- no
  // lock, no reference-count traffic. A Reader keeps its last value alive until its next
  // Current() call, and frees it there if it held the last reference. Not thread-safe: one
  // Reader per thread. Must not outlive its Published.
  class Reader {
   public:
    explicit Reader(const Published& source) : source_(&source) {}

    const std::shared_ptr<const T>& Current() {
      const std::uint64_t version = source_->version_.load(std::memory_order_acquire);
      if (version != version_ || value_ == nullptr) {
        // A Store between the two loads only makes the next call reload once more.
        value_ = source_->Load();
        version_ = version;
      }
      return value_;
    }

   private:
    const Published* source_;
    std::uint64_t version_ = 0;
    std::shared_ptr<const T> value_;
  };

 private:
  void Lock() const DROVER_ACQUIRE() {
    while (locked_.test_and_set(std::memory_order_acquire)) {
      while (locked_.test(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void Unlock() const DROVER_RELEASE() { locked_.clear(std::memory_order_release); }

  mutable std::atomic_flag locked_;  // guards value_
  std::shared_ptr<const T> value_ DROVER_GUARDED_BY(this);
  std::atomic<std::uint64_t> version_{0};  // bumped by every Store
};

}  // namespace drover::router
