// RedisStore: the ResultStore on a Redis server (6.2 or newer) through hiredis, with its options.
// The store owns its two connections (commands; pub/sub) and the pub/sub thread, which it joins
// when destroyed; its Subscriptions must be destroyed before it. Thread-safe: commands are
// serialised on their connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "drover/clock.h"
#include "drover/jobs/result_store.h"
#include "drover/status.h"

namespace drover::jobs {

struct RedisOptions {
  std::string address = "127.0.0.1:6379";  // host:port
  std::string password;                    // AUTH, when set
  Duration connect_timeout = std::chrono::seconds(1);
  Duration command_timeout = std::chrono::seconds(2);
  Duration backoff_initial = std::chrono::milliseconds(100);  // between reconnects, doubling
  Duration backoff_max = std::chrono::seconds(5);
};

// A ResultStore on a Redis server (6.2 or newer: GETDEL) through hiredis. Commands share one
// connection (calls are serialised); pub/sub has a connection and a thread of its own that
// re-subscribes after a reconnect. A lost connection is re-made on the next call, with back-off;
// until then calls fail UNAVAILABLE (transient). LOADING is ABORTED (transient too). The two
// atomic steps are Lua scripts, loaded once per connection and run by EVALSHA (reloaded after a
// server restart's NOSCRIPT).
class RedisStore final : public ResultStore {
 public:
  // Fails only for a bad address: the server may come up later.
  static Result<std::unique_ptr<RedisStore>> Open(RedisOptions options);
  ~RedisStore() override;

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

  struct Impl;

 private:
  explicit RedisStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::jobs
