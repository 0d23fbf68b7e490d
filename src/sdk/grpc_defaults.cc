// The gRPC defaults applied (include/drover/grpc.h): server builder and channel arguments, and
// the registry-backed round-robin channel.
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <thread>

#include "common/thread_name.h"
#include "drover/grpc.h"
#include "drover/host.h"
#include "drover/mutex.h"
#include "drover/router.h"

namespace drover::grpc_defaults {
namespace {

int Ms(Duration d) {
  return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

}  // namespace

void ConfigureServer(grpc::ServerBuilder& builder, const ServerOptions& o) {
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             Ms(o.keepalive_permit));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
                             o.permit_without_calls ? 1 : 0);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, Ms(o.max_connection_age));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, Ms(o.max_connection_age_grace));
}

void ApplyChannelOptions(grpc::ChannelArguments& args, const ChannelOptions& o) {
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Ms(o.keepalive_time));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Ms(o.keepalive_timeout));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, o.keepalive_without_calls ? 1 : 0);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // keep pinging an idle connection
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 1);
  args.SetServiceConfigJSON(ServiceConfigJson(o));
}

void SetDeadline(grpc::ClientContext& context, const ChannelOptions& o) {
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(o.deadline));
}

void ServeWithHost(HostOptions& host, grpc::Server& server, const std::string& address) {
  host.on_session = nullptr;
  host.advertise = address;
  host.stop_accepting = [] {};  // gRPC's Shutdown below refuses new calls itself
  host.drain = [&server](Duration budget) {
    server.Shutdown(std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(budget));
  };
}

struct ServiceChannel::Impl {
  ChannelOptions options;
  std::unique_ptr<DiscoveryClient> discovery;
  mutable Mutex mu;
  CondVar cv;
  bool stopping DROVER_GUARDED_BY(mu) = false;
  std::shared_ptr<grpc::Channel> channel DROVER_GUARDED_BY(mu);
  std::string target DROVER_GUARDED_BY(mu);
  std::uint64_t builds DROVER_GUARDED_BY(mu) = 0;
  std::thread follower;

  // Builds a channel when the routable set differs from the current one.
  Status Refresh() DROVER_EXCLUDES(mu) {
    auto snap = discovery->Snapshot();
    if (!snap.ok()) return snap.status();
    auto next = MultiAddressTarget(*snap->table);
    if (!next.ok()) return next.status();
    {
      MutexLock lock(mu);
      if (*next == target) return Status::Ok();
    }
    grpc::ChannelArguments args;
    ApplyChannelOptions(args, options);
    auto built = grpc::CreateCustomChannel(*next, grpc::InsecureChannelCredentials(), args);
    MutexLock lock(mu);
    spdlog::debug("grpc channel: {} -> {}", target.empty() ? "(none)" : target, *next);
    channel = std::move(built);  // the old one lives on in the calls that hold it
    target = *next;
    ++builds;
    return Status::Ok();
  }

  void Follow() {
    MutexLock lock(mu);
    while (!stopping) {
      lock.Unlock();
      (void)Refresh();  // no instance, or the registry not heard yet: keep the last channel
      lock.Lock();
      cv.WaitFor(mu, std::chrono::milliseconds(50), [&]() DROVER_REQUIRES(mu) { return stopping; });
    }
  }
};

Result<std::unique_ptr<ServiceChannel>> ServiceChannel::Start(DiscoveryOptions discovery,
                                                              ChannelOptions options,
                                                              Clock& clock) {
  DROVER_RETURN_IF_ERROR(Validate(options));
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  DROVER_ASSIGN_OR_RETURN(impl->discovery, DiscoveryClient::Start(std::move(discovery), clock));
  Impl* raw = impl.get();
  impl->follower = std::thread([raw] {
    NameThisThread("drover-channel");
    raw->Follow();
  });
  return std::unique_ptr<ServiceChannel>(new ServiceChannel(std::move(impl)));
}

ServiceChannel::ServiceChannel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ServiceChannel::~ServiceChannel() {
  {
    MutexLock lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.NotifyAll();
  impl_->follower.join();
}

Result<std::shared_ptr<grpc::Channel>> ServiceChannel::Get() {
  {
    MutexLock lock(impl_->mu);
    if (impl_->channel) return impl_->channel;
  }
  DROVER_RETURN_IF_ERROR(impl_->Refresh());  // the first call need not wait for the follower
  MutexLock lock(impl_->mu);
  return impl_->channel;
}

std::string ServiceChannel::target() const {
  MutexLock lock(impl_->mu);
  return impl_->target;
}

std::uint64_t ServiceChannel::builds() const {
  MutexLock lock(impl_->mu);
  return impl_->builds;
}

}  // namespace drover::grpc_defaults
