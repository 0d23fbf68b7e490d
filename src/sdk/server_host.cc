// drover::ServerHost and HostRuntime: HostCore wired to the registry's gRPC API.
#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <set>

#include "common/signals.h"
#include "drover/host.h"
#include "drover/mutex.h"
#include "drover/registry/v1/registry.grpc.pb.h"
#include "sdk/host_core.h"
#include "sdk/registry_channel.h"
#include "sdk/registry_failover.h"

namespace drover {

namespace pb = ::drover::registry::v1;

namespace {

pb::State ToProto(sdk::InstancePhase phase) {
  switch (phase) {
    case sdk::InstancePhase::kReady:
      return pb::READY;
    case sdk::InstancePhase::kDraining:
      return pb::DRAINING;
    case sdk::InstancePhase::kStarting:
      break;
  }
  return pb::STARTING;
}

// The registry over gRPC, at one of its endpoints at a time. Every call has a deadline; a call
// that fails where another registry may not is retried on the next endpoint within that deadline,
// unchanged (same generation: fencing makes the retry safe). Cancel() fails the ones in flight.
class GrpcRegistryWriter final : public sdk::RegistryWriter {
 public:
  GrpcRegistryWriter(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                     const std::string& registries, std::string token)
      : token_(std::move(token)), failover_(sdk::SplitRegistries(registries)) {
    for (const auto& channel : channels) stubs_.push_back(pb::Registry::NewStub(channel));
  }

  Status Register(const sdk::Registration& r, Duration timeout) override {
    pb::RegisterRequest req;
    req.set_service(r.key.service);
    req.set_id(r.key.id);
    pb::InstanceSpec* spec = req.mutable_spec();
    spec->set_address(r.address);
    spec->set_generation(r.key.generation);
    spec->set_state(pb::READY);
    spec->set_ttl_ms(std::chrono::duration_cast<std::chrono::milliseconds>(r.ttl).count());
    spec->set_weight(r.weight);
    spec->set_zone(r.zone);
    spec->set_version(r.version);
    spec->set_accepting(r.accepting);
    for (const auto& [k, v] : r.labels) (*spec->mutable_labels())[k] = v;
    pb::RevisionReply reply;
    return Call(timeout, [&](pb::Registry::Stub& stub, grpc::ClientContext* ctx) {
      return stub.Register(ctx, req, &reply);
    });
  }

  Status Heartbeat(const sdk::InstanceKey& key, Duration timeout) override {
    pb::HeartbeatRequest req;
    req.set_service(key.service);
    req.set_id(key.id);
    req.set_generation(key.generation);
    pb::RevisionReply reply;
    return Call(timeout, [&](pb::Registry::Stub& stub, grpc::ClientContext* ctx) {
      return stub.Heartbeat(ctx, req, &reply);
    });
  }

  Status SetState(const sdk::InstanceKey& key, std::optional<sdk::InstancePhase> phase,
                  std::optional<bool> accepting, Duration timeout) override {
    pb::SetStateRequest req;
    req.set_service(key.service);
    req.set_id(key.id);
    req.set_generation(key.generation);
    if (phase) req.set_state(ToProto(*phase));
    if (accepting) req.set_accepting(*accepting);
    pb::RevisionReply reply;
    return Call(timeout, [&](pb::Registry::Stub& stub, grpc::ClientContext* ctx) {
      return stub.SetState(ctx, req, &reply);
    });
  }

  Status Deregister(const sdk::InstanceKey& key, Duration timeout) override {
    pb::DeregisterRequest req;
    req.set_service(key.service);
    req.set_id(key.id);
    req.set_generation(key.generation);
    pb::RevisionReply reply;
    return Call(timeout, [&](pb::Registry::Stub& stub, grpc::ClientContext* ctx) {
      return stub.Deregister(ctx, req, &reply);
    });
  }

  Result<std::uint64_t> CurrentGeneration(const std::string& service, const std::string& id,
                                          Duration timeout) override {
    pb::ListRequest req;
    req.set_service(service);
    pb::ListReply reply;
    const Status s = Call(timeout, [&](pb::Registry::Stub& stub, grpc::ClientContext* ctx) {
      return stub.List(ctx, req, &reply);
    });
    if (!s.ok()) return s;
    for (const pb::Instance& in : reply.instances()) {
      if (in.id() == id) return in.spec().generation();
    }
    return std::uint64_t{0};
  }

  void Cancel() override {
    MutexLock lock(mu_);
    cancelled_ = true;
    for (grpc::ClientContext* ctx : active_) ctx->TryCancel();
  }

 private:
  template <typename F>
  Status Call(Duration timeout, F&& rpc) {
    const auto deadline = std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(timeout);
    Status last = DeadlineExceededError("no time left for the registry call");
    for (std::size_t attempt = 0; attempt < stubs_.size(); ++attempt) {
      const auto now = std::chrono::system_clock::now();
      if (now >= deadline) break;
      // Each endpoint still to try gets its share of the time: one that hangs cannot use it all.
      const auto share = (deadline - now) / static_cast<int>(stubs_.size() - attempt);
      const std::size_t index = failover_.current();
      grpc::ClientContext ctx;
      ctx.set_deadline(now + share);
      // Every registry failed since the last success: this call waits, within its share, for
      // the connection instead of failing at once on the last attempt's error (and polls the
      // channel meanwhile, so a registry that is back is reached at once; AwaitRegistry).
      ctx.set_wait_for_ready(failover_.AllFailing());
      if (!token_.empty()) ctx.AddMetadata("authorization", "Bearer " + token_);
      {
        MutexLock lock(mu_);
        if (cancelled_) return CancelledError("host is shutting down");
        active_.insert(&ctx);
      }
      const grpc::Status status = rpc(*stubs_[index], &ctx);
      bool cancelled = false;
      {
        MutexLock lock(mu_);
        active_.erase(&ctx);
        cancelled = cancelled_;
      }
      if (status.ok()) {
        failover_.Succeeded(index);
        return Status::Ok();
      }
      last = Status(static_cast<StatusCode>(status.error_code()), status.error_message());
      if (cancelled) return CancelledError("host is shutting down");
      if (!sdk::MayWorkElsewhere(last.code())) return last;
      (void)failover_.Failed(index, last);  // the caller's own schedule is the backoff
      last = last.WithContext("registry " + failover_.endpoint(index));
    }
    return last;
  }

  const std::string token_;
  std::vector<std::unique_ptr<pb::Registry::Stub>> stubs_;  // one per endpoint
  sdk::RegistryFailover failover_;
  Mutex mu_;
  std::set<grpc::ClientContext*> active_ DROVER_GUARDED_BY(mu_);
  bool cancelled_ DROVER_GUARDED_BY(mu_) = false;
};

}  // namespace

struct HostRuntime::Impl {
  RealClock clock;
  sdk::Heartbeats heartbeats{clock};
};

HostRuntime::HostRuntime() : impl_(std::make_unique<Impl>()) {}
HostRuntime::~HostRuntime() = default;

std::shared_ptr<HostRuntime> HostRuntime::Create() {
  return std::shared_ptr<HostRuntime>(new HostRuntime());
}

struct ServerHost::Impl {
  // Destroyed bottom-up: the core (which shuts down) before the writer and the runtime it uses.
  std::shared_ptr<HostRuntime> runtime;
  std::unique_ptr<GrpcRegistryWriter> writer;
  std::unique_ptr<sdk::HostCore> core;
};

Result<std::unique_ptr<ServerHost>> ServerHost::Create(HostOptions options,
                                                       std::shared_ptr<HostRuntime> runtime) {
  if (Status s = sdk::NormalizeHostOptions(options); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->runtime = runtime ? std::move(runtime) : HostRuntime::Create();
  auto channels = sdk::RegistryChannels(options.registry, options.registry_ca);
  if (!channels.ok()) return channels.status();
  impl->writer = std::make_unique<GrpcRegistryWriter>(*channels, options.registry, options.token);
  HostRuntime::Impl& rt = impl->runtime->impl();
  impl->core =
      std::make_unique<sdk::HostCore>(std::move(options), *impl->writer, rt.heartbeats, rt.clock);
  if (Status s = impl->core->Init(); !s.ok()) return s;
  return std::unique_ptr<ServerHost>(new ServerHost(std::move(impl)));
}

ServerHost::ServerHost(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ServerHost::~ServerHost() { Shutdown(); }

Status ServerHost::Start() { return impl_->core->Start(); }
void ServerHost::Shutdown() { impl_->core->Shutdown(); }
Status ServerHost::SetAccepting(bool accepting, const std::string& reason) {
  return impl_->core->SetAccepting(accepting, reason);
}
const std::string& ServerHost::id() const { return impl_->core->id(); }
std::string ServerHost::address() const { return impl_->core->address(); }
std::uint16_t ServerHost::health_port() const { return impl_->core->health_port(); }
std::uint64_t ServerHost::generation() const { return impl_->core->generation(); }
std::vector<ShutdownStep> ServerHost::shutdown_steps() const {
  return impl_->core->shutdown_steps();
}
HostStats ServerHost::stats() const { return impl_->core->stats(); }

void BlockTerminationSignals() { (void)BlockShutdownSignals(); }

int WaitForTerminationSignal() { return WaitForSignal(ShutdownSignals()); }

}  // namespace drover
