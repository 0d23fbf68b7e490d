// EmbeddedStore: the in-process ResultStore (include/drover/jobs.h).
#include <charconv>

#include "drover/jobs.h"
#include "drover/mutex.h"
#include "sdk/subscriber.h"

namespace drover::jobs {

struct EmbeddedStore::State {
  explicit State(Clock& c) : clock(c) {}
  Clock& clock;
  Mutex mu;
  bool available DROVER_GUARDED_BY(mu) = true;
  struct Entry {
    std::string value;
    std::optional<MonoTime> expires;
  };
  std::map<std::string, Entry> data DROVER_GUARDED_BY(mu);
  std::multimap<std::string, std::shared_ptr<Subscriber>> subscribers DROVER_GUARDED_BY(mu);

  // The live entry at `key`, dropping it if it expired.
  Entry* Find(const std::string& key) DROVER_REQUIRES(mu) {
    auto it = data.find(key);
    if (it == data.end()) return nullptr;
    if (it->second.expires && clock.Now() >= *it->second.expires) {
      data.erase(it);
      return nullptr;
    }
    return &it->second;
  }
  Status Check() const DROVER_REQUIRES(mu) {
    return available ? Status::Ok() : UnavailableError("embedded store: unavailable (test)");
  }
};

namespace {

class EmbeddedSubscription final : public Subscription {
 public:
  EmbeddedSubscription(std::weak_ptr<EmbeddedStore::State> state, std::string channel,
                       std::shared_ptr<Subscriber> sub)
      : state_(std::move(state)), channel_(std::move(channel)), sub_(std::move(sub)) {}
  ~EmbeddedSubscription() override {
    sub_->Silence();
    if (auto state = state_.lock()) {
      MutexLock lock(state->mu);
      auto [from, to] = state->subscribers.equal_range(channel_);
      for (auto it = from; it != to; ++it) {
        if (it->second == sub_) {
          state->subscribers.erase(it);
          break;
        }
      }
    }
  }

 private:
  std::weak_ptr<EmbeddedStore::State> state_;
  std::string channel_;
  std::shared_ptr<Subscriber> sub_;
};

}  // namespace

EmbeddedStore::EmbeddedStore(Clock& clock) : state_(std::make_shared<State>(clock)) {}
EmbeddedStore::~EmbeddedStore() = default;

Result<std::optional<std::string>> EmbeddedStore::Get(const std::string& key) {
  MutexLock lock(state_->mu);
  DROVER_RETURN_IF_ERROR(state_->Check());
  const State::Entry* e = state_->Find(key);
  return e ? std::optional<std::string>(e->value) : std::nullopt;
}

Result<std::optional<std::string>> EmbeddedStore::GetDel(const std::string& key) {
  MutexLock lock(state_->mu);
  DROVER_RETURN_IF_ERROR(state_->Check());
  const State::Entry* e = state_->Find(key);
  if (e == nullptr) return std::optional<std::string>();
  std::optional<std::string> value = e->value;
  state_->data.erase(key);
  return value;
}

Status EmbeddedStore::Del(const std::string& key) {
  MutexLock lock(state_->mu);
  DROVER_RETURN_IF_ERROR(state_->Check());
  state_->data.erase(key);
  return Status::Ok();
}

Status EmbeddedStore::Set(const std::string& key, const std::string& value, Duration ttl) {
  MutexLock lock(state_->mu);
  DROVER_RETURN_IF_ERROR(state_->Check());
  State::Entry& e = state_->data[key];
  e.value = value;
  e.expires =
      ttl > Duration::zero() ? std::optional<MonoTime>(state_->clock.Now() + ttl) : std::nullopt;
  return Status::Ok();
}

Status EmbeddedStore::Publish(const std::string& channel, const std::string& message) {
  std::vector<std::shared_ptr<Subscriber>> to_call;
  {
    MutexLock lock(state_->mu);
    DROVER_RETURN_IF_ERROR(state_->Check());
    auto [from, to] = state_->subscribers.equal_range(channel);
    for (auto it = from; it != to; ++it) to_call.push_back(it->second);
  }
  for (const auto& sub : to_call) sub->Deliver(message);
  return Status::Ok();
}

Result<std::unique_ptr<Subscription>> EmbeddedStore::Subscribe(
    const std::string& channel, std::function<void(const std::string&)> on_message) {
  auto sub = std::make_shared<Subscriber>(std::move(on_message));
  MutexLock lock(state_->mu);
  DROVER_RETURN_IF_ERROR(state_->Check());
  state_->subscribers.emplace(channel, sub);
  return std::unique_ptr<Subscription>(
      std::make_unique<EmbeddedSubscription>(state_, channel, std::move(sub)));
}

Result<std::int64_t> EmbeddedStore::IncrementWithTtl(const std::string& key, Duration ttl) {
  MutexLock lock(state_->mu);
  DROVER_RETURN_IF_ERROR(state_->Check());
  std::int64_t n = 0;
  if (const State::Entry* e = state_->Find(key)) {
    const auto [end, ec] = std::from_chars(e->value.data(), e->value.data() + e->value.size(), n);
    if (ec != std::errc() || end != e->value.data() + e->value.size()) {
      return FailedPreconditionError(key + " does not hold an integer");
    }
  }
  State::Entry& e = state_->data[key];
  e.value = std::to_string(++n);
  e.expires = state_->clock.Now() + ttl;
  return n;
}

Result<bool> EmbeddedStore::CompareAndSet(const std::string& key, const std::string& from,
                                          const std::string& to, Duration ttl) {
  MutexLock lock(state_->mu);
  DROVER_RETURN_IF_ERROR(state_->Check());
  const State::Entry* e = state_->Find(key);
  if ((e == nullptr ? std::string() : e->value) != from) return false;
  State::Entry& entry = state_->data[key];
  entry.value = to;
  entry.expires =
      ttl > Duration::zero() ? std::optional<MonoTime>(state_->clock.Now() + ttl) : std::nullopt;
  return true;
}

void EmbeddedStore::SetAvailable(bool available) {
  MutexLock lock(state_->mu);
  state_->available = available;
}

std::optional<Duration> EmbeddedStore::TtlOf(const std::string& key) {
  MutexLock lock(state_->mu);
  const State::Entry* e = state_->Find(key);
  if (e == nullptr || !e->expires) return std::nullopt;
  return *e->expires - state_->clock.Now();
}

}  // namespace drover::jobs
