// A ResultStore subscriber's callback (EmbeddedStore, RedisStore), guarded so that once its
// Subscription is gone it is never called again and is not in the middle of a call: Deliver
// calls it under `mu`; Silence, from the Subscription's destructor, clears it under `mu`.
#pragma once

#include <functional>
#include <string>

#include "drover/mutex.h"

namespace drover::jobs {

class Subscriber {
 public:
  explicit Subscriber(std::function<void(const std::string&)> on_message)
      : on_message_(std::move(on_message)) {}

  void Deliver(const std::string& message) {
    MutexLock lock(mu_);
    if (on_message_) on_message_(message);
  }
  void Silence() {
    MutexLock lock(mu_);  // waits out a call in progress
    on_message_ = nullptr;
  }

 private:
  Mutex mu_;
  // Empty once silenced.
  std::function<void(const std::string&)> on_message_ DROVER_GUARDED_BY(mu_);
};

}  // namespace drover::jobs
