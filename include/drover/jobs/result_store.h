// The result store seam (JOB-1): where results wait for their consumer -- keys with TTLs,
// pub/sub, and two atomic steps -- as the ResultStore interface that the producer, the waiter,
// the retry budget and the dispatcher use (implementations: EmbeddedStore, RedisStore). A caller
// owns the store and keeps it alive while anything uses it; the caller of Subscribe owns the
// Subscription it returns. Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover::jobs {

// Ends a subscription when destroyed.
class Subscription {
 public:
  virtual ~Subscription() = default;
};

// Where results wait for their consumer (JOB-1): keys with TTLs, pub/sub, and two atomic steps.
// Errors: UNAVAILABLE (unreachable), ABORTED (loading) and DEADLINE_EXCEEDED are transient;
// FAILED_PRECONDITION means the key holds something else. Thread-safe.
class ResultStore {
 public:
  virtual ~ResultStore() = default;
  virtual Result<std::optional<std::string>> Get(const std::string& key) = 0;
  virtual Result<std::optional<std::string>> GetDel(const std::string& key) = 0;  // atomic
  virtual Status Del(const std::string& key) = 0;
  virtual Status Set(const std::string& key, const std::string& value, Duration ttl) = 0;
  virtual Status Publish(const std::string& channel, const std::string& message) = 0;
  // Calls `on_message` (on a store thread; keep it short) for each message published on
  // `channel` after Subscribe returned, until the Subscription is destroyed.
  virtual Result<std::unique_ptr<Subscription>> Subscribe(
      const std::string& channel, std::function<void(const std::string&)> on_message) = 0;
  // Increments the integer at `key` and sets its TTL, in one atomic step; the new value.
  virtual Result<std::int64_t> IncrementWithTtl(const std::string& key, Duration ttl) = 0;
  // Sets `key` to `to` (TTL `ttl`) only if it holds `from` ("" for absent); true if it did.
  virtual Result<bool> CompareAndSet(const std::string& key, const std::string& from,
                                     const std::string& to, Duration ttl) = 0;
};

}  // namespace drover::jobs
