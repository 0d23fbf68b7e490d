// The per-node circuit breaker (include/drover/jobs.h, JOB-7).
#include <algorithm>

#include "drover/jobs.h"

namespace drover::jobs {

std::string_view BreakerStateName(CircuitBreaker::State s) {
  switch (s) {
    case CircuitBreaker::State::kClosed:
      return "closed";
    case CircuitBreaker::State::kOpen:
      return "open";
    case CircuitBreaker::State::kHalfOpen:
      return "half-open";
  }
  return "?";
}

CircuitBreaker::CircuitBreaker(BreakerOptions options, Clock& clock)
    : options_(options), clock_(clock) {}

void CircuitBreaker::Transition(State to) {
  state_ = to;
  ++epoch_;  // every permit handed out before is now from another state
  failures_ = 0;
  probes_.clear();
  if (to == State::kOpen) opened_at_ = clock_.Now();
}

void CircuitBreaker::Tick() {
  const MonoTime now = clock_.Now();
  if (state_ == State::kOpen && now - opened_at_ >= options_.open_for) {
    Transition(State::kHalfOpen);
  }
  if (state_ == State::kHalfOpen &&
      std::any_of(probes_.begin(), probes_.end(),
                  [&](const Probe& p) { return now - p.started >= options_.probe_max_wait; })) {
    Transition(State::kOpen);  // a probe that never answered counts as a failed one
  }
}

std::optional<CircuitBreaker::Permit> CircuitBreaker::TryAcquire() {
  MutexLock lock(mu_);
  Tick();
  switch (state_) {
    case State::kClosed:
      return Permit{epoch_, 0};
    case State::kOpen:
      return std::nullopt;
    case State::kHalfOpen:
      if (static_cast<int>(probes_.size()) >= options_.half_open_probes) return std::nullopt;
      probes_.push_back(Probe{next_probe_, clock_.Now()});
      return Permit{epoch_, next_probe_++};
  }
  return std::nullopt;
}

void CircuitBreaker::Report(const Permit& permit, CallOutcome outcome) {
  MutexLock lock(mu_);
  Tick();
  if (permit.epoch != epoch_) return;  // started in another state: it decides nothing now
  const bool failure =
      outcome == CallOutcome::kProtocolError || outcome == CallOutcome::kTransportError;
  if (permit.probe != 0) {
    auto it = std::find_if(probes_.begin(), probes_.end(),
                           [&](const Probe& p) { return p.id == permit.probe; });
    if (it == probes_.end()) return;  // reclaimed already
    probes_.erase(it);                // its slot, and only its slot, is free again
    if (outcome == CallOutcome::kCancelled) return;
    Transition(failure ? State::kOpen : State::kClosed);
    return;
  }
  if (state_ != State::kClosed || outcome == CallOutcome::kCancelled) return;
  if (!failure) {
    failures_ = 0;  // success, or a step error: the node did its work
    return;
  }
  if (++failures_ >= options_.failure_threshold) Transition(State::kOpen);
}

CircuitBreaker::State CircuitBreaker::state() {
  MutexLock lock(mu_);
  Tick();
  return state_;
}

int CircuitBreaker::probes_in_flight() {
  MutexLock lock(mu_);
  Tick();
  return static_cast<int>(probes_.size());
}

}  // namespace drover::jobs
