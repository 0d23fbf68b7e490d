#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "drover/discovery.h"
#include "drover/mutex.h"
#include "drover/registry/v1/registry.grpc.pb.h"
#include "sdk/registry_channel.h"
#include "sdk/service_view.h"
#include "sdk/watch_decoder.h"

namespace drover {

namespace pb = ::drover::registry::v1;

namespace {

constexpr Duration kMaxBackoff = std::chrono::seconds(5);
constexpr auto kListDeadline = std::chrono::seconds(5);

}  // namespace

struct DiscoveryClient::Impl {
  Impl(DiscoveryOptions opts, Clock& c)
      : options(std::move(opts)),
        clock(c),
        view(options.service, sdk::ServiceViewOptions{options.max_drop_fraction}) {}

  void Run(std::stop_token stop);
  // One watch stream from the view's revision, until it ends. True if it delivered anything.
  bool WatchOnce();
  // Lists the service and applies it; a list that drops too much is confirmed by a second one.
  bool ListOnce(bool confirming = false);
  void Apply(const pb::Event& event);
  void Publish(bool connected);
  std::unique_ptr<grpc::ClientContext> NewContext() const;
  // The call that Stop() cancels; false when stopping already.
  bool SetActive(grpc::ClientContext* ctx);

  const DiscoveryOptions options;
  Clock& clock;
  std::unique_ptr<pb::Registry::Stub> stub;

  // Owned by the client's thread.
  sdk::ServiceView view;
  bool degraded = false;
  MonoTime heard_at{};         // the registry's last answer (event, progress or list)
  bool outage_logged = false;  // one warning per outage, not one per retry

  router::Published<DiscoverySnapshot> published;
  mutable Mutex published_mu;  // with published_cv: WaitForRevision
  mutable CondVar published_cv;

  // Why the registry has not answered, for Snapshot() before the first answer.
  void NoteFailure(const grpc::Status& status);
  mutable Mutex failure_mu;
  Status last_failure DROVER_GUARDED_BY(failure_mu);

  Mutex active_mu;
  grpc::ClientContext* active DROVER_GUARDED_BY(active_mu) = nullptr;
  bool stopping DROVER_GUARDED_BY(active_mu) = false;

  std::jthread thread;
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
  return true;
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
  snapshot->heard_at = heard_at;
  snapshot->connected = connected;
  snapshot->degraded = degraded;
  {
    MutexLock lock(published_mu);
    published.Store(std::move(snapshot));
  }
  published_cv.NotifyAll();
}

bool DiscoveryClient::Impl::ListOnce(bool confirming) {
  auto ctx = NewContext();
  ctx->set_deadline(std::chrono::system_clock::now() + kListDeadline);
  if (!SetActive(ctx.get())) return false;
  pb::ListRequest req;
  req.set_service(options.service);
  pb::ListReply reply;
  const grpc::Status status = stub->List(ctx.get(), req, &reply);
  SetActive(nullptr);
  if (!status.ok()) {
    NoteFailure(status);
    return false;
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
  if (sdk::ApplyWatchEvent(view, event, clock, degraded) == sdk::Applied::kNeedsConfirmation) {
    spdlog::warn("discovery {}: a RESYNC would drop most of the service; confirming by List",
                 options.service);
    ListOnce(true);
  }
}

void DiscoveryClient::Impl::NoteFailure(const grpc::Status& status) {
  Status failure(static_cast<StatusCode>(status.error_code()),
                 "discovery " + options.service + ": the registry at " + options.registry +
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
  req.set_from_revision(view.revision());
  auto reader = stub->Watch(ctx.get(), req);
  pb::Event event;
  bool delivered = false;
  while (reader->Read(&event)) {
    Apply(event);
    delivered = true;
    heard_at = clock.Now();
    Publish(true);
    if (outage_logged) {
      spdlog::info("discovery {}: watching again from revision {}", options.service,
                   view.revision());
      outage_logged = false;
    }
  }
  const grpc::Status status = reader->Finish();
  SetActive(nullptr);
  if (status.error_code() != grpc::StatusCode::CANCELLED && !outage_logged) {
    spdlog::warn(
        "discovery {}: watch ended ({}); serving the last snapshot at revision {} and "
        "retrying",
        options.service, status.error_message(), view.revision());
    outage_logged = true;
  }
  return delivered;
}

void DiscoveryClient::Impl::Run(std::stop_token stop) {
  Duration backoff = options.reconnect_backoff;
  MonoTime next_list{};
  while (!stop.stop_requested()) {
    // A List first (and every list_interval while the watch keeps failing): a fresh baseline
    // even when the watch cannot be opened, and a revision to watch from.
    if (view.revision() == 0 || clock.Now() >= next_list) {
      ListOnce();
      next_list = clock.Now() + options.list_interval;
    }
    if (stop.stop_requested()) break;
    if (WatchOnce()) backoff = options.reconnect_backoff;
    if (stop.stop_requested()) break;
    if (published.Load()) Publish(false);  // still the last good view, now disconnected
    clock.SleepFor(backoff, stop);
    backoff = std::min<Duration>(backoff * 2, kMaxBackoff);
  }
}

Result<std::unique_ptr<DiscoveryClient>> DiscoveryClient::Start(DiscoveryOptions options,
                                                                Clock& clock) {
  if (options.registry.empty()) return InvalidArgumentError("discovery: no registry address");
  if (options.service.empty()) return InvalidArgumentError("discovery: no service");
  if (options.max_drop_fraction < 0 || options.max_drop_fraction > 1) {
    return InvalidArgumentError("discovery: max_drop_fraction must be within 0..1");
  }
  auto channel = sdk::RegistryChannel(options.registry, options.registry_ca);
  if (!channel.ok()) return channel.status().WithContext("discovery");
  auto impl = std::make_unique<Impl>(std::move(options), clock);
  impl->stub = pb::Registry::NewStub(*channel);
  Impl* raw = impl.get();
  impl->thread = std::jthread([raw](std::stop_token stop) { raw->Run(stop); });
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
    if (impl_->thread.joinable()) impl_->thread.join();
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

Duration DiscoveryClient::Age() const {
  auto snapshot = impl_->published.Load();
  if (!snapshot) return Duration::max();
  return impl_->clock.Now() - snapshot->heard_at;
}

bool DiscoveryClient::WaitForRevision(std::uint64_t revision,
                                      std::chrono::milliseconds timeout) const {
  MutexLock lock(impl_->published_mu);
  return impl_->published_cv.WaitFor(impl_->published_mu, timeout, [&] {
    auto snapshot = impl_->published.Load();
    return snapshot && snapshot->table->version() >= revision;
  });
}

}  // namespace drover
