#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "common/thread_name.h"
#include "drover/discovery.h"
#include "drover/mutex.h"
#include "drover/registry/v1/registry.grpc.pb.h"
#include "sdk/registry_channel.h"
#include "sdk/registry_failover.h"
#include "sdk/service_view.h"
#include "sdk/watch_decoder.h"

namespace drover {

namespace pb = ::drover::registry::v1;

namespace {

constexpr auto kListDeadline = std::chrono::seconds(5);

}  // namespace

struct DiscoveryClient::Impl {
  Impl(DiscoveryOptions opts, Clock& c)
      : options(std::move(opts)),
        clock(c),
        failover(
            sdk::SplitRegistries(options.registry),
            sdk::RegistryFailoverOptions{options.reconnect_backoff, options.reconnect_backoff_cap}),
        view(options.service, sdk::ServiceViewOptions{options.max_drop_fraction}) {}

  void Run(std::stop_token stop);
  void NoteStaleness();
  bool stale_logged = false;  // the watch thread's only
  // One watch stream from the view's revision, until it ends. True if it delivered anything.
  bool WatchOnce();
  // Lists the service and applies it; a list that drops too much is confirmed by a second one.
  bool ListOnce(bool confirming = false);
  void Apply(const pb::Event& event);
  void Publish(bool connected);
  std::unique_ptr<grpc::ClientContext> NewContext() const;
  // The call that Stop() cancels (nullptr: none); false when stopping.
  bool SetActive(grpc::ClientContext* ctx);
  // A call on endpoint `index` failed: the failover moves on, and the next try waits as it says.
  void Failed(std::size_t index, const grpc::Status& status);

  const DiscoveryOptions options;
  Clock& clock;
  std::vector<std::shared_ptr<grpc::Channel>> channels;    // one per registry endpoint
  std::vector<std::unique_ptr<pb::Registry::Stub>> stubs;  // one per registry endpoint
  sdk::RegistryFailover failover;
  Duration retry_wait{};  // before the next watch, after a failure; owned by the thread

  // Owned by the client's thread.
  sdk::ServiceView view;
  bool degraded = false;
  MonoTime heard_at{};         // the registry's last answer (event, progress or list)
  bool outage_logged = false;  // one warning per outage, not one per retry

  router::Published<DiscoverySnapshot> published;
  mutable Mutex published_mu;  // with published_cv: the Wait* calls
  mutable CondVar published_cv;
  // Waits until a published snapshot satisfies `done` (false after `timeout`).
  template <typename Done>
  bool WaitUntil(std::chrono::milliseconds timeout, Done done) const {
    MutexLock lock(published_mu);
    return published_cv.WaitFor(published_mu, timeout, [&] {
      auto snapshot = published.Load();
      return snapshot && done(*snapshot);
    });
  }

  // Why the registry has not answered, for Snapshot() before the first answer.
  void NoteFailure(std::size_t index, const grpc::Status& status);
  mutable Mutex failure_mu;
  Status last_failure DROVER_GUARDED_BY(failure_mu);

  // A watch stream was accepted (true) or ended (false): the gap bookkeeping of Stats().
  void NoteConnected(bool connected);
  // The watch on endpoint `index` is in place.
  void Accepted(std::size_t index);
  mutable Mutex stats_mu;
  DiscoveryStats stats DROVER_GUARDED_BY(stats_mu);
  MonoTime disconnected_at DROVER_GUARDED_BY(stats_mu){};  // when the last stream ended

  Mutex active_mu;
  grpc::ClientContext* active DROVER_GUARDED_BY(active_mu) = nullptr;
  bool stopping DROVER_GUARDED_BY(active_mu) = false;

  // The watchdog: a watch stream that says nothing for `watch_silence_limit` (the registry sends
  // PROGRESS every few seconds) is to a registry that froze or whose host vanished without a
  // reset; it is cancelled, and the client moves on.
  void Watchdog(std::stop_token stop);
  std::atomic<MonoTime::rep> last_heard{0};  // the active stream's last word (clock ticks)
  std::atomic<bool> silenced{false};         // the watchdog cancelled the active stream
  std::atomic<bool> watching{false};         // the active call is a watch stream

  std::jthread thread;
  std::jthread watchdog;
  std::once_flag stop_once;
};

std::unique_ptr<grpc::ClientContext> DiscoveryClient::Impl::NewContext() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!options.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options.token);
  return ctx;
}

bool DiscoveryClient::Impl::SetActive(grpc::ClientContext* ctx) {
  MutexLock lock(active_mu);
  if (stopping && ctx != nullptr) return false;
  active = ctx;
  return !stopping;
}

void DiscoveryClient::Impl::Publish(bool connected) {
  auto table = view.Table();
  if (!table.ok()) {
    spdlog::error("discovery {}: cannot build a table: {}", options.service,
                  table.status().ToString());
    return;
  }
  auto snapshot = std::make_shared<DiscoverySnapshot>();
  snapshot->table = std::move(*table);
  snapshot->changes = view.changes();
  snapshot->heard_at = heard_at;
  snapshot->connected = connected;
  snapshot->degraded = degraded;
  {
    MutexLock lock(published_mu);
    published.Store(std::move(snapshot));
  }
  published_cv.NotifyAll();
  NoteStaleness();
}

bool DiscoveryClient::Impl::ListOnce(bool confirming) {
  auto ctx = NewContext();
  ctx->set_deadline(std::chrono::system_clock::now() + kListDeadline);
  if (!SetActive(ctx.get())) return false;
  pb::ListRequest req;
  req.set_service(options.service);
  pb::ListReply reply;
  const std::size_t index = failover.current();
  const grpc::Status status = stubs[index]->List(ctx.get(), req, &reply);
  if (!SetActive(nullptr)) return false;  // stopping: a failure now is the cancel
  if (!status.ok()) {
    NoteFailure(index, status);
    Failed(index, status);
    return false;
  }
  failover.Succeeded(index);
  {
    MutexLock lock(stats_mu);
    ++stats.lists;
  }
  std::vector<router::Endpoint> endpoints;
  endpoints.reserve(static_cast<std::size_t>(reply.instances_size()));
  for (const pb::Instance& in : reply.instances())
    endpoints.push_back(sdk::EndpointFromProto(in, clock));
  const sdk::Applied applied = view.Replace(std::move(endpoints), reply.revision(), confirming);
  if (applied == sdk::Applied::kNeedsConfirmation) {
    spdlog::warn("discovery {}: the registry's list would drop most of the service; reading again",
                 options.service);
    return ListOnce(true);
  }
  degraded = reply.degraded();
  heard_at = clock.Now();
  Publish(false);
  return true;
}

void DiscoveryClient::Impl::Apply(const pb::Event& event) {
  const sdk::Applied applied = sdk::ApplyWatchEvent(view, event, clock, degraded);
  if (applied != sdk::Applied::kRepeated) {  // (a resumed watch replays its last revision)
    MutexLock lock(stats_mu);
    if (event.type() == pb::Event::PUT || event.type() == pb::Event::DELETE) ++stats.events;
    if (event.type() == pb::Event::DELETE) ++stats.deletes;
    if (event.type() == pb::Event::RESYNC) ++stats.resyncs;
  }
  if (applied == sdk::Applied::kNeedsConfirmation) {
    spdlog::warn("discovery {}: a RESYNC would drop most of the service; confirming by List",
                 options.service);
    ListOnce(true);
  }
}

void DiscoveryClient::Impl::Accepted(std::size_t index) {
  failover.Succeeded(index);
  NoteConnected(true);
  // The registry will send everything after the view's revision: the view is current as of now.
  heard_at = clock.Now();
  if (published.Load()) Publish(true);
  if (outage_logged) {
    spdlog::info("discovery {}: watching again on {} from revision {}", options.service,
                 failover.endpoint(index), view.resume_revision());
    outage_logged = false;
  }
}

void DiscoveryClient::Impl::NoteConnected(bool connected) {
  const MonoTime now = clock.Now();
  MutexLock lock(stats_mu);
  if (connected) {
    ++stats.watches;
    if (stats.watches > 1) stats.longest_gap = std::max(stats.longest_gap, now - disconnected_at);
  } else {
    disconnected_at = now;
  }
  stats.connected = connected;
}

void DiscoveryClient::Impl::Failed(std::size_t index, const grpc::Status& status) {
  const Status why(static_cast<StatusCode>(status.error_code()), status.error_message());
  if (sdk::MayWorkElsewhere(why.code())) {
    retry_wait = failover.Failed(index, why);
  } else {
    // A refusal (token, limits) or a revision this registry has not reached yet: the same
    // registry, a little later.
    retry_wait = options.reconnect_backoff_cap;
  }
}

void DiscoveryClient::Impl::NoteFailure(std::size_t index, const grpc::Status& status) {
  Status failure(static_cast<StatusCode>(status.error_code()),
                 "discovery " + options.service + ": the registry at " + failover.endpoint(index) +
                     " answered: " + status.error_message());
  MutexLock lock(failure_mu);
  // A refusal (token, TLS) will not fix itself: say so once, loudly. Outages are logged by the
  // watch loop.
  const bool refused = failure.code() == StatusCode::kUnauthenticated ||
                       failure.code() == StatusCode::kPermissionDenied;
  if (refused && failure.message() != last_failure.message()) {
    spdlog::error("{}", failure.message());
  } else {
    spdlog::debug("{}", failure.message());
  }
  last_failure = std::move(failure);
}

bool DiscoveryClient::Impl::WatchOnce() {
  auto ctx = NewContext();
  if (!SetActive(ctx.get())) return false;
  pb::WatchRequest req;
  req.set_service(options.service);
  req.set_from_revision(view.resume_revision());
  const std::size_t index = failover.current();
  last_heard.store(clock.Now().time_since_epoch().count());
  watching.store(true);
  auto reader = stubs[index]->Watch(ctx.get(), req);
  // The registry sends its headers once the watch is in place, before any event: from then on the
  // client is connected, even while nothing changes.
  reader->WaitForInitialMetadata();
  bool accepted = ctx->GetServerInitialMetadata().contains(kWatchAcceptedHeader);
  if (accepted) Accepted(index);
  pb::Event event;
  bool delivered = false;
  while (reader->Read(&event)) {
    last_heard.store(clock.Now().time_since_epoch().count());
    if (!accepted) {  // a registry that sends no header first: its first event says the same
      accepted = true;
      Accepted(index);
    }
    Apply(event);
    delivered = true;
    heard_at = clock.Now();
    Publish(true);
  }
  grpc::Status status = reader->Finish();
  watching.store(false);
  if (accepted) NoteConnected(false);
  if (!SetActive(nullptr)) return delivered;  // stopping: the cancel was ours
  if (silenced.exchange(false)) {
    status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "no word from the registry for " +
                              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                                 options.watch_silence_limit)
                                                 .count()) +
                              " s");
  }
  Failed(index,
         status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "the stream ended") : status);
  if (!outage_logged) {
    spdlog::warn(
        "discovery {}: watch on {} ended ({}); serving the last snapshot at revision {} and "
        "retrying",
        options.service, failover.endpoint(index), status.error_message(), view.revision());
    outage_logged = true;
  }
  return delivered;
}

void DiscoveryClient::Impl::Watchdog(std::stop_token stop) {
  const Duration limit = options.watch_silence_limit;
  const Duration tick = std::min<Duration>(std::chrono::seconds(1), limit / 4);
  while (clock.SleepFor(tick, stop)) {
    const MonoTime heard{Duration(last_heard.load())};
    if (clock.Now() - heard < limit) continue;
    MutexLock lock(active_mu);
    if (active == nullptr || stopping || !watching.load()) continue;
    silenced.store(true);
    active->TryCancel();
    last_heard.store(clock.Now().time_since_epoch().count());  // once per silence
  }
}

// Logs the snapshot turning stale, and fresh again, once each (run on the watch thread, between
// attempts: while a watch is live the snapshot is fresh).
void DiscoveryClient::Impl::NoteStaleness() {
  const Duration limit = options.max_stale;
  auto snapshot = published.Load();
  if (limit <= Duration::zero() || !snapshot) return;
  const Duration age = clock.Now() - snapshot->heard_at;
  const bool stale = age > limit;
  if (stale == stale_logged) return;
  stale_logged = stale;
  const double seconds = std::chrono::duration<double>(age).count();
  if (stale) {
    spdlog::warn(
        "discovery {}: the registry has not been heard for {:.1f} s (max_stale {:.0f} s): the "
        "snapshot at revision {} is stale; still serving it",
        options.service, seconds, std::chrono::duration<double>(limit).count(),
        snapshot->table->version());
  } else {
    spdlog::info("discovery {}: the registry is heard again; the snapshot is fresh",
                 options.service);
  }
}

void DiscoveryClient::Impl::Run(std::stop_token stop) {
  MonoTime next_list{};
  while (!stop.stop_requested()) {
    // A List first (and every list_interval while the watch keeps failing): a fresh baseline
    // even when the watch cannot be opened, and a revision to watch from.
    if (view.revision() == 0 || clock.Now() >= next_list) {
      ListOnce();
      next_list = clock.Now() + options.list_interval;
    }
    if (stop.stop_requested()) break;
    retry_wait = Duration::zero();
    WatchOnce();
    if (stop.stop_requested()) break;
    if (published.Load())
      Publish(false);  // still the last good view, now disconnected (and stale?)
    if (failover.AllFailing()) {
      // Every registry failed: wait on the next one's connection, not a blind sleep -- the
      // watch reopens as soon as it connects, within the same backoff.
      sdk::AwaitRegistry(*channels[failover.current()], retry_wait, stop);
    } else {
      clock.SleepFor(retry_wait, stop);
    }
  }
}

Result<std::unique_ptr<DiscoveryClient>> DiscoveryClient::Start(DiscoveryOptions options,
                                                                Clock& clock) {
  if (options.registry.empty()) return InvalidArgumentError("discovery: no registry address");
  if (options.service.empty()) return InvalidArgumentError("discovery: no service");
  if (options.max_drop_fraction < 0 || options.max_drop_fraction > 1) {
    return InvalidArgumentError("discovery: max_drop_fraction must be within 0..1");
  }
  if (options.reconnect_backoff <= Duration::zero() ||
      options.reconnect_backoff_cap < options.reconnect_backoff) {
    return InvalidArgumentError(
        "discovery: reconnect_backoff must be positive and at most reconnect_backoff_cap");
  }
  auto channels = sdk::RegistryChannels(options.registry, options.registry_ca);
  if (!channels.ok()) return channels.status().WithContext("discovery");
  auto impl = std::make_unique<Impl>(std::move(options), clock);
  for (const auto& channel : *channels) impl->stubs.push_back(pb::Registry::NewStub(channel));
  impl->channels = std::move(*channels);
  Impl* raw = impl.get();
  impl->thread = std::jthread([raw](std::stop_token stop) {
    NameThisThread("drover-watch");
    raw->Run(stop);
  });
  if (raw->options.watch_silence_limit > Duration::zero()) {
    impl->watchdog = std::jthread([raw](std::stop_token stop) {
      NameThisThread("drover-watchdog");
      raw->Watchdog(stop);
    });
  }
  return std::unique_ptr<DiscoveryClient>(new DiscoveryClient(std::move(impl)));
}

DiscoveryClient::DiscoveryClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DiscoveryClient::~DiscoveryClient() { Stop(); }

void DiscoveryClient::Stop() {
  std::call_once(impl_->stop_once, [this] {
    {
      MutexLock lock(impl_->active_mu);
      impl_->stopping = true;
      if (impl_->active != nullptr) impl_->active->TryCancel();
    }
    impl_->thread.request_stop();
    impl_->watchdog.request_stop();
    if (impl_->thread.joinable()) impl_->thread.join();
    if (impl_->watchdog.joinable()) impl_->watchdog.join();
  });
}

Result<DiscoverySnapshot> DiscoveryClient::Snapshot() const {
  auto snapshot = impl_->published.Load();
  if (!snapshot) {
    MutexLock lock(impl_->failure_mu);
    if (!impl_->last_failure.ok()) return impl_->last_failure;
    return UnavailableError("discovery " + impl_->options.service +
                            ": no answer from the registry yet");
  }
  return *snapshot;
}

DiscoveryStats DiscoveryClient::Stats() const {
  const MonoTime now = impl_->clock.Now();
  DiscoveryStats out;
  {
    MutexLock lock(impl_->stats_mu);
    out = impl_->stats;
    if (!out.connected && out.watches > 0) {
      out.longest_gap = std::max(out.longest_gap, now - impl_->disconnected_at);
    }
  }
  out.registry = impl_->failover.endpoint(impl_->failover.current());
  return out;
}

bool DiscoveryClient::Stale() const {
  const Duration limit = impl_->options.max_stale;
  if (limit <= Duration::zero() || !impl_->published.Load()) return false;
  return Age() > limit;
}

Duration DiscoveryClient::Age() const {
  auto snapshot = impl_->published.Load();
  if (!snapshot) return Duration::max();
  return impl_->clock.Now() - snapshot->heard_at;
}

bool DiscoveryClient::WaitForRevision(std::uint64_t revision,
                                      std::chrono::milliseconds timeout) const {
  return impl_->WaitUntil(timeout, [&](const DiscoverySnapshot& snapshot) {
    return snapshot.table->version() >= revision;
  });
}

bool DiscoveryClient::WaitForChange(std::uint64_t revision, std::uint64_t changes,
                                    std::chrono::milliseconds timeout) const {
  return impl_->WaitUntil(timeout, [&](const DiscoverySnapshot& snapshot) {
    return snapshot.NewerThan(revision, changes);
  });
}

}  // namespace drover
