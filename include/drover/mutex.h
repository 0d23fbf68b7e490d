// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable_any with the annotations
// that clang's thread safety analysis checks (-Wthread-safety), and the macros that say what a
// mutex guards:
//
//   class Table {
//    public:
//     void Put(int v) DROVER_EXCLUDES(mu_) {
//       MutexLock lock(mu_);
//       PutLocked(v);
//     }
//    private:
//     void PutLocked(int v) DROVER_REQUIRES(mu_) { values_.push_back(v); }
//     Mutex mu_;
//     std::vector<int> values_ DROVER_GUARDED_BY(mu_);
//   };
//
// Reading or writing `values_` without holding `mu_`, or calling PutLocked without it, is then a
// compile error in Drover's clang build (scripts/test.sh builds every part with clang and
// -Wthread-safety -Werror). On GCC the macros are empty and the types cost what std::mutex does.
//
// A condition is waited for in a loop or with a predicate lambda that says it needs the mutex:
//   while (!ready_) cv_.Wait(mu_);
//   cv_.Wait(mu_, stop, [&]() DROVER_REQUIRES(mu_) { return ready_; });
//
// All three types are thread-safe, as their std counterparts; none is copyable or movable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>

#if defined(__clang__)
#define DROVER_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define DROVER_THREAD_ANNOTATION_(x)
#endif

// On a class: it is a capability (a mutex).
#define DROVER_CAPABILITY(name) DROVER_THREAD_ANNOTATION_(capability(name))
// On a class: an object that holds a capability for its lifetime (a lock guard).
#define DROVER_SCOPED_CAPABILITY DROVER_THREAD_ANNOTATION_(scoped_lockable)
// On a member: read and written only while `mu` is held.
#define DROVER_GUARDED_BY(mu) DROVER_THREAD_ANNOTATION_(guarded_by(mu))
// On a pointer member: what it points to is accessed only while `mu` is held.
#define DROVER_PT_GUARDED_BY(mu) DROVER_THREAD_ANNOTATION_(pt_guarded_by(mu))
// On a function: the caller holds these.
#define DROVER_REQUIRES(...) DROVER_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
// On a function: the caller must not hold these (the function takes them).
#define DROVER_EXCLUDES(...) DROVER_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
// On a function: it takes / releases these (or, on a scoped capability, its own).
#define DROVER_ACQUIRE(...) DROVER_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define DROVER_RELEASE(...) DROVER_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define DROVER_TRY_ACQUIRE(...) DROVER_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
// On a function: it returns (a reference to) this capability.
#define DROVER_RETURN_CAPABILITY(x) DROVER_THREAD_ANNOTATION_(lock_returned(x))
// On a function the analysis cannot follow; say why next to it.
#define DROVER_NO_THREAD_SAFETY_ANALYSIS DROVER_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace drover {

class DROVER_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() DROVER_ACQUIRE() { mu_.lock(); }
  void unlock() DROVER_RELEASE() { mu_.unlock(); }
  bool try_lock() DROVER_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction; Unlock() and Lock() let go of it and take it
// again in between (for work that must not hold it).
class DROVER_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) DROVER_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() DROVER_RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() DROVER_RELEASE() {
    mu_.unlock();
    held_ = false;
  }
  void Lock() DROVER_ACQUIRE() {
    mu_.lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// A condition variable waited on with the Mutex that guards its condition held. Every wait may
// wake spuriously: wait in a loop or with a predicate.
class CondVar {
 public:
  void Wait(Mutex& mu) DROVER_REQUIRES(mu) { cv_.wait(mu); }
  template <typename Predicate>
  void Wait(Mutex& mu, Predicate done) DROVER_REQUIRES(mu) {
    cv_.wait(mu, std::move(done));
  }
  // False when `stop` was requested before `done` held.
  template <typename Predicate>
  bool Wait(Mutex& mu, std::stop_token stop, Predicate done) DROVER_REQUIRES(mu) {
    return cv_.wait(mu, std::move(stop), std::move(done));
  }
  // False when the deadline passed first.
  template <typename Clock, typename Dur>
  bool WaitUntil(Mutex& mu, const std::chrono::time_point<Clock, Dur>& deadline)
      DROVER_REQUIRES(mu) {
    return cv_.wait_until(mu, deadline) == std::cv_status::no_timeout;
  }
  // The value of `done` when the deadline passed or it held.
  template <typename Clock, typename Dur, typename Predicate>
  bool WaitUntil(Mutex& mu, const std::chrono::time_point<Clock, Dur>& deadline, Predicate done)
      DROVER_REQUIRES(mu) {
    return cv_.wait_until(mu, deadline, std::move(done));
  }
  // Also false when `stop` was requested.
  template <typename Clock, typename Dur, typename Predicate>
  bool WaitUntil(Mutex& mu, std::stop_token stop,
                 const std::chrono::time_point<Clock, Dur>& deadline, Predicate done)
      DROVER_REQUIRES(mu) {
    return cv_.wait_until(mu, std::move(stop), deadline, std::move(done));
  }
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(Mutex& mu, const std::chrono::duration<Rep, Period>& timeout, Predicate done)
      DROVER_REQUIRES(mu) {
    return cv_.wait_for(mu, timeout, std::move(done));
  }

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

}  // namespace drover
