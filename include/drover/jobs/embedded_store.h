// EmbeddedStore: the in-process ResultStore, for the demo and unit tests, whose TTLs run on an
// injected Clock and whose availability a test can switch off. The caller owns the store and the
// Clock, which must outlive it; the store owns its data; a Subscription may outlive its store
// (it then simply ends). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "drover/clock.h"
#include "drover/jobs/result_store.h"
#include "drover/status.h"

namespace drover::jobs {

// An in-process store (the demo, unit tests). TTLs run on `clock`. `SetAvailable(false)` makes
// every call fail UNAVAILABLE, as an unreachable server would.
class EmbeddedStore final : public ResultStore {
 public:
  explicit EmbeddedStore(Clock& clock);
  ~EmbeddedStore() override;

  Result<std::optional<std::string>> Get(const std::string& key) override;
  Result<std::optional<std::string>> GetDel(const std::string& key) override;
  Status Del(const std::string& key) override;
  Status Set(const std::string& key, const std::string& value, Duration ttl) override;
  Status Publish(const std::string& channel, const std::string& message) override;
  Result<std::unique_ptr<Subscription>> Subscribe(
      const std::string& channel, std::function<void(const std::string&)> on_message) override;
  Result<std::int64_t> IncrementWithTtl(const std::string& key, Duration ttl) override;
  Result<bool> CompareAndSet(const std::string& key, const std::string& from, const std::string& to,
                             Duration ttl) override;

  void SetAvailable(bool available);
  // The TTL left on `key`, if it exists and has one.
  std::optional<Duration> TtlOf(const std::string& key);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace drover::jobs
