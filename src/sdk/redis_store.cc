// RedisStore: the ResultStore on a Redis server, through hiredis (include/drover/jobs.h).
//
// Commands: one blocking connection behind a mutex, re-made on the next call after a failure
// (with doubling back-off). Pub/sub: a second connection owned by one thread, which polls it and
// an eventfd (for new or dropped subscriptions), and subscribes again to every channel after a
// reconnect. Callbacks run on that thread under their subscriber's own mutex, so a Subscription
// that is destroyed is never called again nor in the middle of a call.
#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <thread>

#include "common/host_port.h"
#include "common/thread_name.h"
#include "drover/jobs.h"
#include "drover/mutex.h"
#include "sdk/subscriber.h"

namespace drover::jobs {
namespace {

struct ReplyFree {
  void operator()(redisReply* r) const {
    if (r != nullptr) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

struct ContextFree {
  void operator()(redisContext* c) const {
    if (c != nullptr) redisFree(c);
  }
};
using Context = std::unique_ptr<redisContext, ContextFree>;

timeval ToTimeval(Duration d) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  return timeval{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
}

std::string ReplyText(const redisReply* r) {
  return r->str == nullptr ? std::string() : std::string(r->str, r->len);
}

// A Redis error reply as a Status: what can pass is transient, what is wrong is not.
Status FromErrorReply(const std::string& where, const redisReply* r) {
  const std::string text = ReplyText(r);
  const auto starts = [&](std::string_view p) { return text.rfind(p, 0) == 0; };
  if (starts("LOADING") || starts("BUSY") || starts("MASTERDOWN") || starts("TRYAGAIN")) {
    return AbortedError(where + ": " + text);
  }
  if (starts("WRONGTYPE")) return FailedPreconditionError(where + ": " + text);
  if (starts("NOSCRIPT")) return NotFoundError(where + ": " + text);
  if (starts("NOAUTH") || starts("WRONGPASS")) {
    return PermissionDeniedError(where + ": " + text);
  }
  return InternalError(where + ": " + text);
}

// Connects (and authenticates): a ready context, or why not.
Result<Context> Dial(const std::string& host, int port, const RedisOptions& o,
                     const std::string& where) {
  Context c(redisConnectWithTimeout(host.c_str(), port, ToTimeval(o.connect_timeout)));
  if (!c) return UnavailableError(where + ": cannot allocate a connection");
  if (c->err != 0) return UnavailableError(where + ": " + c->errstr);
  redisSetTimeout(c.get(), ToTimeval(o.command_timeout));
  redisEnableKeepAlive(c.get());
  if (!o.password.empty()) {
    const char* argv[] = {"AUTH", o.password.c_str()};
    const std::size_t len[] = {4, o.password.size()};
    Reply r(static_cast<redisReply*>(redisCommandArgv(c.get(), 2, argv, len)));
    if (!r) return UnavailableError(where + ": " + c->errstr);
    if (r->type == REDIS_REPLY_ERROR) return FromErrorReply(where, r.get());
  }
  return c;
}

// INCR + PEXPIRE in one step (JOB-6): the counter can never be left without its TTL.
constexpr std::string_view kIncrementScript =
    "local n = redis.call('INCR', KEYS[1]) "
    "redis.call('PEXPIRE', KEYS[1], ARGV[1]) "
    "return n";
// SET key to ARGV[2] only if it holds ARGV[1] ('' = absent); PX ARGV[3] unless it is 0.
constexpr std::string_view kCompareAndSetScript =
    "local v = redis.call('GET', KEYS[1]) "
    "if (v == false and ARGV[1] == '') or v == ARGV[1] then "
    "  if ARGV[3] == '0' then redis.call('SET', KEYS[1], ARGV[2]) "
    "  else redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end "
    "  return 1 "
    "end "
    "return 0";

std::string Millis(Duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

}  // namespace

struct RedisStore::Impl {
  RedisOptions options;
  std::string host;
  int port = 0;
  std::string where;  // "redis at host:port", for messages

  // --- commands ---
  Mutex mu;
  Context ctx DROVER_GUARDED_BY(mu);  // null while disconnected
  std::chrono::steady_clock::time_point next_try DROVER_GUARDED_BY(mu);
  Duration backoff DROVER_GUARDED_BY(mu) = Duration::zero();
  std::string last_error DROVER_GUARDED_BY(mu);
  std::map<std::string_view, std::string> shas DROVER_GUARDED_BY(mu);  // script -> SHA1

  Status EnsureConnected() DROVER_REQUIRES(mu) {
    if (ctx) return Status::Ok();
    const auto now = std::chrono::steady_clock::now();
    if (now < next_try) {
      return UnavailableError(where + ": reconnecting (last error: " + last_error + ")");
    }
    auto c = Dial(host, port, options, where);
    if (!c.ok()) {
      Failed(c.status().message());
      return c.status();
    }
    ctx = std::move(*c);
    backoff = Duration::zero();
    return Status::Ok();
  }

  // Drops the connection and backs off.
  void Failed(const std::string& error) DROVER_REQUIRES(mu) {
    ctx.reset();
    last_error = error;
    backoff = backoff == Duration::zero() ? options.backoff_initial
                                          : std::min(backoff * 2, options.backoff_max);
    next_try = std::chrono::steady_clock::now() + backoff;
  }

  // One command.
  Result<Reply> Command(const std::vector<std::string_view>& args) DROVER_REQUIRES(mu) {
    DROVER_RETURN_IF_ERROR(EnsureConnected());
    std::vector<const char*> argv;
    std::vector<std::size_t> len;
    for (std::string_view a : args) {
      argv.push_back(a.data());
      len.push_back(a.size());
    }
    Reply r(static_cast<redisReply*>(
        redisCommandArgv(ctx.get(), static_cast<int>(argv.size()), argv.data(), len.data())));
    if (!r) {
      const std::string error = ctx->errstr;
      Failed(error);
      return UnavailableError(where + ": " + error);
    }
    if (r->type == REDIS_REPLY_ERROR) return FromErrorReply(where, r.get());
    return r;
  }

  // EVALSHA of `script` on one key, loading it first when this server does not know it.
  Result<Reply> Script(std::string_view script, const std::string& key,
                       const std::vector<std::string>& args) DROVER_REQUIRES(mu) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::string& sha = shas[script];
      if (sha.empty()) {
        DROVER_ASSIGN_OR_RETURN(Reply loaded, Command({"SCRIPT", "LOAD", script}));
        sha = ReplyText(loaded.get());
      }
      std::vector<std::string_view> call = {"EVALSHA", sha, "1", key};
      for (const std::string& a : args) call.push_back(a);
      auto r = Command(call);
      if (r.ok() || r.status().code() != StatusCode::kNotFound) return r;
      sha.clear();  // NOSCRIPT: the server restarted and forgot it
    }
    return UnavailableError(where + ": the script vanished twice in a row");
  }

  Result<std::optional<std::string>> Value(const std::vector<std::string_view>& args) {
    MutexLock lock(mu);
    DROVER_ASSIGN_OR_RETURN(Reply r, Command(args));
    if (r->type == REDIS_REPLY_NIL) return std::optional<std::string>();
    if (r->type != REDIS_REPLY_STRING) {
      return FailedPreconditionError(where + ": unexpected reply type");
    }
    return std::optional<std::string>(ReplyText(r.get()));
  }

  // --- pub/sub ---
  Mutex sub_mu;
  CondVar sub_cv;  // a subscription confirmed, or the connection changed
  std::multimap<std::string, std::shared_ptr<Subscriber>> subscribers DROVER_GUARDED_BY(sub_mu);
  std::set<std::string> confirmed DROVER_GUARDED_BY(sub_mu);  // on the current connection
  std::set<std::string> to_subscribe DROVER_GUARDED_BY(sub_mu);
  std::set<std::string> to_unsubscribe DROVER_GUARDED_BY(sub_mu);
  enum class Phase { kConnecting, kConnected, kDown };
  // Of the pub/sub connection.
  Phase phase DROVER_GUARDED_BY(sub_mu) = Phase::kConnecting;
  bool stopping DROVER_GUARDED_BY(sub_mu) = false;
  int wake_fd = -1;
  std::thread sub_thread;

  void Wake() const {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd, &one, sizeof one);
  }

  void Dispatch(const redisReply* r) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3) return;
    const std::string kind = ReplyText(r->element[0]);
    const std::string channel = ReplyText(r->element[1]);
    if (kind == "subscribe") {
      MutexLock lock(sub_mu);
      confirmed.insert(channel);
      sub_cv.NotifyAll();
      return;
    }
    if (kind != "message") return;
    const std::string payload = ReplyText(r->element[2]);
    std::vector<std::shared_ptr<Subscriber>> to_call;
    {
      MutexLock lock(sub_mu);
      auto [from, to] = subscribers.equal_range(channel);
      for (auto it = from; it != to; ++it) to_call.push_back(it->second);
    }
    for (const auto& s : to_call) s->Deliver(payload);
  }

  // The pub/sub thread: (re)connects, sends what is to be (un)subscribed and dispatches what
  // arrives, until the store stops.
  void SubscriberLoop() {
    Context c;
    Duration wait = Duration::zero();
    while (true) {
      {
        MutexLock lock(sub_mu);
        if (stopping) return;
      }
      if (!c && !Connect(c, wait)) continue;
      SendSubscriptions(c.get());
      if (!Flush(c.get()) || !Receive(c.get())) Drop(c, wait);
    }
  }

  Duration NextWait(Duration wait) const {
    return wait == Duration::zero() ? options.backoff_initial
                                    : std::min(wait * 2, options.backoff_max);
  }

  // Dials the pub/sub connection, on which every channel is then to be subscribed again. When
  // that fails, waits out the back-off (cut short by a wake) and returns false.
  bool Connect(Context& c, Duration& wait) {
    auto dialed = Dial(host, port, options, where);
    if (!dialed.ok()) {
      {
        MutexLock lock(sub_mu);
        phase = Phase::kDown;
        sub_cv.NotifyAll();
      }
      wait = NextWait(wait);
      pollfd p{wake_fd, POLLIN, 0};
      ::poll(&p, 1,
             static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count()));
      std::uint64_t n;
      if ((p.revents & POLLIN) != 0) (void)!::read(wake_fd, &n, sizeof n);
      return false;
    }
    c = std::move(*dialed);
    wait = Duration::zero();
    MutexLock lock(sub_mu);
    phase = Phase::kConnected;
    confirmed.clear();
    to_unsubscribe.clear();
    for (const auto& [channel, s] : subscribers) to_subscribe.insert(channel);
    return true;
  }

  // Drops the pub/sub connection after a failure: nothing is confirmed any more.
  void Drop(Context& c, Duration& wait) {
    c.reset();
    MutexLock lock(sub_mu);
    phase = Phase::kDown;
    confirmed.clear();
    sub_cv.NotifyAll();
    wait = NextWait(wait);
  }

  // Queues the pending UNSUBSCRIBEs and SUBSCRIBEs on the connection.
  void SendSubscriptions(redisContext* c) {
    MutexLock lock(sub_mu);
    for (const std::string& ch : to_unsubscribe) {
      redisAppendCommand(c, "UNSUBSCRIBE %b", ch.data(), ch.size());
    }
    for (const std::string& ch : to_subscribe) {
      redisAppendCommand(c, "SUBSCRIBE %b", ch.data(), ch.size());
    }
    to_unsubscribe.clear();
    to_subscribe.clear();
  }

  // Writes out what is queued; false when the connection failed.
  static bool Flush(redisContext* c) {
    int done = 0;
    bool failed = false;
    while (done == 0 && !failed) failed = redisBufferWrite(c, &done) == REDIS_ERR;
    return !failed;
  }

  // Waits up to half a second for replies or a wake and dispatches the replies that came; false
  // when the connection failed.
  bool Receive(redisContext* c) {
    pollfd fds[2] = {{c->fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    if (::poll(fds, 2, 500) < 0) return true;
    if ((fds[1].revents & POLLIN) != 0) {
      std::uint64_t n;
      (void)!::read(wake_fd, &n, sizeof n);
    }
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      if (redisBufferRead(c) == REDIS_ERR) return false;
      void* raw = nullptr;
      while (redisGetReplyFromReader(c, &raw) == REDIS_OK && raw != nullptr) {
        Reply r(static_cast<redisReply*>(raw));
        Dispatch(r.get());
        raw = nullptr;
      }
    }
    return true;
  }
};

namespace {

class RedisSubscription final : public Subscription {
 public:
  RedisSubscription(RedisStore::Impl* impl, std::string channel, std::shared_ptr<Subscriber> sub)
      : impl_(impl), channel_(std::move(channel)), sub_(std::move(sub)) {}
  ~RedisSubscription() override {
    sub_->Silence();
    MutexLock lock(impl_->sub_mu);
    auto [from, to] = impl_->subscribers.equal_range(channel_);
    for (auto it = from; it != to; ++it) {
      if (it->second == sub_) {
        impl_->subscribers.erase(it);
        break;
      }
    }
    if (impl_->subscribers.count(channel_) == 0) {
      impl_->to_subscribe.erase(channel_);
      if (impl_->confirmed.erase(channel_) > 0) impl_->to_unsubscribe.insert(channel_);
      impl_->Wake();
    }
  }

 private:
  RedisStore::Impl* impl_;  // the store outlives its subscriptions
  std::string channel_;
  std::shared_ptr<Subscriber> sub_;
};

}  // namespace

Result<std::unique_ptr<RedisStore>> RedisStore::Open(RedisOptions options) {
  DROVER_ASSIGN_OR_RETURN(const HostPort address, ParseHostPort(options.address, "redis address"));
  auto impl = std::make_unique<Impl>();
  impl->host = address.host;
  impl->port = address.port;
  impl->where = "redis at " + options.address;
  impl->options = std::move(options);
  impl->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl->wake_fd < 0) return UnavailableError("eventfd failed");
  Impl* raw = impl.get();
  impl->sub_thread = std::thread([raw] {
    NameThisThread("redis-sub");
    raw->SubscriberLoop();
  });
  return std::unique_ptr<RedisStore>(new RedisStore(std::move(impl)));
}

RedisStore::RedisStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RedisStore::~RedisStore() {
  {
    MutexLock lock(impl_->sub_mu);
    impl_->stopping = true;
  }
  impl_->Wake();
  impl_->sub_thread.join();
  ::close(impl_->wake_fd);
}

Result<std::optional<std::string>> RedisStore::Get(const std::string& key) {
  return impl_->Value({"GET", key});
}

Result<std::optional<std::string>> RedisStore::GetDel(const std::string& key) {
  return impl_->Value({"GETDEL", key});
}

Status RedisStore::Del(const std::string& key) {
  MutexLock lock(impl_->mu);
  return impl_->Command({"DEL", key}).status();
}

Status RedisStore::Set(const std::string& key, const std::string& value, Duration ttl) {
  MutexLock lock(impl_->mu);
  if (ttl <= Duration::zero()) return impl_->Command({"SET", key, value}).status();
  return impl_->Command({"SET", key, value, "PX", Millis(ttl)}).status();
}

Status RedisStore::Publish(const std::string& channel, const std::string& message) {
  MutexLock lock(impl_->mu);
  return impl_->Command({"PUBLISH", channel, message}).status();
}

Result<std::unique_ptr<Subscription>> RedisStore::Subscribe(
    const std::string& channel, std::function<void(const std::string&)> on_message) {
  auto sub = std::make_shared<Subscriber>(std::move(on_message));
  MutexLock lock(impl_->sub_mu);
  impl_->subscribers.emplace(channel, sub);
  impl_->to_unsubscribe.erase(channel);
  if (impl_->confirmed.count(channel) == 0) impl_->to_subscribe.insert(channel);
  impl_->Wake();
  // Connected or connecting: wait (bounded) for the server to confirm, so that a message
  // published after this returns is delivered. Down: it starts with the next connection.
  impl_->sub_cv.WaitFor(
      impl_->sub_mu, impl_->options.command_timeout, [&]() DROVER_REQUIRES(impl_->sub_mu) {
        return impl_->confirmed.count(channel) > 0 || impl_->phase == Impl::Phase::kDown;
      });
  return std::unique_ptr<Subscription>(
      std::make_unique<RedisSubscription>(impl_.get(), channel, std::move(sub)));
}

Result<std::int64_t> RedisStore::IncrementWithTtl(const std::string& key, Duration ttl) {
  MutexLock lock(impl_->mu);
  DROVER_ASSIGN_OR_RETURN(Reply r, impl_->Script(kIncrementScript, key, {Millis(ttl)}));
  if (r->type != REDIS_REPLY_INTEGER) {
    return InternalError(impl_->where + ": the counter script returned no integer");
  }
  return static_cast<std::int64_t>(r->integer);
}

Result<bool> RedisStore::CompareAndSet(const std::string& key, const std::string& from,
                                       const std::string& to, Duration ttl) {
  MutexLock lock(impl_->mu);
  DROVER_ASSIGN_OR_RETURN(Reply r,
                          impl_->Script(kCompareAndSetScript, key,
                                        {from, to, ttl > Duration::zero() ? Millis(ttl) : "0"}));
  if (r->type != REDIS_REPLY_INTEGER) {
    return InternalError(impl_->where + ": the CAS script returned no integer");
  }
  return r->integer == 1;
}

}  // namespace drover::jobs
