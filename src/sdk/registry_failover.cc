#include "sdk/registry_failover.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace drover::sdk {

bool MayWorkElsewhere(StatusCode code) {
  return code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded ||
         code == StatusCode::kCancelled;
}

RegistryFailover::RegistryFailover(std::vector<std::string> endpoints,
                                   RegistryFailoverOptions options)
    : endpoints_(std::move(endpoints)),
      options_(options),
      backoff_(options.min_backoff),
      random_(std::random_device{}()) {}

std::string RegistryFailover::names() const {
  std::string out;
  for (const std::string& e : endpoints_) out += (out.empty() ? "" : ",") + e;
  return out;
}

std::size_t RegistryFailover::current() const {
  MutexLock lock(mu_);
  return current_;
}

bool RegistryFailover::AllFailing() const {
  MutexLock lock(mu_);
  return failures_ >= endpoints_.size();
}

Duration RegistryFailover::Failed(std::size_t index, const Status& why) {
  MutexLock lock(mu_);
  if (index != current_) return Duration::zero();  // someone moved on already: try that one
  if (failures_ == 0) outage_since_ = MonoClock::now();
  ++failures_;
  current_ = (current_ + 1) % endpoints_.size();
  if (failures_ < endpoints_.size()) {
    spdlog::warn("registry {} failed ({}); moving to {}", endpoints_[index], why.ToString(),
                 endpoints_[current_]);
    return Duration::zero();
  }
  if (failures_ == endpoints_.size()) {
    spdlog::warn(
        "registry: {} unreachable ({}); retrying with backoff up to {} ms, serving what is "
        "known meanwhile",
        endpoints_.size() == 1 ? endpoints_[0] : "every registry (" + names() + ") is",
        why.ToString(),
        std::chrono::duration_cast<std::chrono::milliseconds>(options_.max_backoff).count());
  }
  const Duration wait = backoff_;
  backoff_ = std::min<Duration>(backoff_ * 2, options_.max_backoff);
  const auto ticks = static_cast<std::uint64_t>(wait.count());
  std::uniform_int_distribution<std::uint64_t> jitter(ticks / 2, ticks);
  return Duration(static_cast<Duration::rep>(jitter(random_)));
}

void RegistryFailover::Succeeded(std::size_t index) {
  MutexLock lock(mu_);
  if (index != current_ || failures_ == 0) return;
  if (failures_ >= endpoints_.size()) {
    spdlog::info(
        "registry {} answers again after {} ms", endpoints_[index],
        std::chrono::duration_cast<std::chrono::milliseconds>(MonoClock::now() - outage_since_)
            .count());
  }
  failures_ = 0;
  backoff_ = options_.min_backoff;
}

}  // namespace drover::sdk
