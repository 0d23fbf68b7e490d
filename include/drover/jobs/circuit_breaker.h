// The per-node circuit breaker (JOB-7): tells a failed job from a failed node -- a step error
// leaves the node in service, protocol and transport failures count against it. A CircuitBreaker
// owns its state and holds a reference to a Clock the caller owns, which must outlive it.
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "drover/clock.h"
#include "drover/mutex.h"

namespace drover::jobs {

struct BreakerOptions {
  int failure_threshold = 5;  // consecutive breaker failures that open it
  Duration open_for = std::chrono::seconds(10);
  int half_open_probes = 1;  // calls let through at once while half-open
  // A probe that has not reported within this is presumed failed and its slot reclaimed, so a
  // lost probe can never wedge the breaker half-open.
  Duration probe_max_wait = std::chrono::seconds(30);
};

// How a call through the breaker ended.
enum class CallOutcome : std::uint8_t {
  kSuccess = 0,
  kStepError = 1,       // the node answered with a step error: the node is fine (not a failure)
  kProtocolError = 2,   // the node broke the contract: a failure
  kTransportError = 3,  // unreachable, timed out, crashed: a failure
  kCancelled = 4,       // the caller gave up: neither success nor failure
};

// One breaker per compute node (JOB-7). Thread-safe.
//   closed:    every call goes; `failure_threshold` failures in a row open it.
//   open:      no call goes, for `open_for`; then half-open.
//   half-open: up to `half_open_probes` calls go, as probes. A probe's success or step error
//              closes the breaker; its failure opens it again; its cancellation just frees its
//              slot. Only a probe's own report can free its slot or decide the state: a call
//              that started in an earlier state reports into nothing.
class CircuitBreaker {
 public:
  enum class State : std::uint8_t { kClosed = 0, kOpen = 1, kHalfOpen = 2 };

  // A call's ticket: pass it back to Report exactly once.
  struct Permit {
    std::uint64_t epoch = 0;  // the state the call started in
    std::uint64_t probe = 0;  // its probe slot while half-open (0: not a probe)
  };

  CircuitBreaker(BreakerOptions options, Clock& clock);

  // A permit when a call may go now; nullopt when the breaker is open or every probe slot of the
  // half-open state is taken.
  std::optional<Permit> TryAcquire();
  void Report(const Permit& permit, CallOutcome outcome);

  State state();
  int probes_in_flight();

 private:
  void Transition(State to) DROVER_REQUIRES(mu_);
  // Open -> half-open, expired probes reclaimed.
  void Tick() DROVER_REQUIRES(mu_);

  const BreakerOptions options_;
  Clock& clock_;
  Mutex mu_;
  State state_ DROVER_GUARDED_BY(mu_) = State::kClosed;
  std::uint64_t epoch_ DROVER_GUARDED_BY(mu_) = 1;
  int failures_ DROVER_GUARDED_BY(mu_) = 0;
  MonoTime opened_at_ DROVER_GUARDED_BY(mu_);
  std::uint64_t next_probe_ DROVER_GUARDED_BY(mu_) = 1;
  struct Probe {
    std::uint64_t id = 0;
    MonoTime started{};
  };
  std::vector<Probe> probes_ DROVER_GUARDED_BY(mu_);
};

std::string_view BreakerStateName(CircuitBreaker::State s);  // "closed", "open", "half-open"

}  // namespace drover::jobs
