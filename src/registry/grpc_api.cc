#include "registry/grpc_api.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <mutex>
#include <set>

#include "drover/registry/v1/registry.grpc.pb.h"
#include "registry/auth.h"
#include "registry/registry.h"

namespace drover::registry {

namespace pb = ::drover::registry::v1;

namespace {

grpc::Status ToGrpc(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

pb::State ToProto(InstanceState state) {
  switch (state) {
    case InstanceState::kStarting:
      return pb::STARTING;
    case InstanceState::kReady:
      return pb::READY;
    case InstanceState::kDraining:
      return pb::DRAINING;
  }
  return pb::STATE_UNSPECIFIED;
}

Result<InstanceState> FromProto(pb::State state) {
  switch (state) {
    case pb::STARTING:
      return InstanceState::kStarting;
    case pb::READY:
      return InstanceState::kReady;
    case pb::DRAINING:
      return InstanceState::kDraining;
    default:
      return InvalidArgumentError("unknown state " + std::to_string(static_cast<int>(state)));
  }
}

void ToProto(const Instance& in, pb::Instance* out) {
  out->set_service(in.service);
  out->set_id(in.id);
  pb::InstanceSpec* spec = out->mutable_spec();
  spec->set_address(in.spec.address);
  spec->set_generation(in.spec.generation);
  spec->set_state(ToProto(in.spec.state));
  spec->set_ttl_ms(in.spec.ttl_ms);
  spec->set_weight(in.spec.weight);
  spec->set_zone(in.spec.zone);
  spec->mutable_labels()->insert(in.spec.labels.begin(), in.spec.labels.end());
  spec->set_version(in.spec.version);
  spec->set_accepting(in.spec.accepting);
  out->set_create_revision(in.create_revision);
  out->set_mod_revision(in.mod_revision);
  if (in.ready_since != SystemTime{}) out->set_ready_since_ms(ToUnixMillis(in.ready_since));
}

Result<InstanceSpec> FromProto(const pb::InstanceSpec& in) {
  InstanceSpec spec;
  spec.address = in.address();
  spec.generation = in.generation();
  if (in.state() != pb::STATE_UNSPECIFIED) {
    DROVER_ASSIGN_OR_RETURN(spec.state, FromProto(in.state()));
  }
  if (in.ttl_ms() != 0) spec.ttl_ms = in.ttl_ms();
  if (in.weight() != 0) spec.weight = in.weight();
  spec.zone = in.zone();
  spec.labels.insert(in.labels().begin(), in.labels().end());
  spec.version = in.version();
  if (in.has_accepting()) spec.accepting = in.accepting();
  return spec;
}

void ToProto(const Event& e, pb::Event* out) {
  out->set_revision(e.revision);
  switch (e.type) {
    case EventType::kPut:
      out->set_type(pb::Event::PUT);
      ToProto(e.instance, out->mutable_instance());
      break;
    case EventType::kDelete:
      out->set_type(pb::Event::DELETE);
      ToProto(e.instance, out->mutable_instance());
      out->set_reason(std::string(RemovalReasonName(e.reason)));
      break;
    case EventType::kResync:
      out->set_type(pb::Event::RESYNC);
      for (const Instance& in : e.snapshot) ToProto(in, out->add_snapshot());
      out->set_degraded(e.degraded);
      break;
    case EventType::kProgress:
      out->set_type(pb::Event::PROGRESS);
      out->set_degraded(e.degraded);
      break;
  }
}

grpc::Status Reply(const Result<std::uint64_t>& revision, pb::RevisionReply* reply) {
  if (!revision.ok()) return ToGrpc(revision.status());
  reply->set_revision(*revision);
  return grpc::Status::OK;
}

}  // namespace

class RegistryService final : public pb::Registry::Service {
 public:
  RegistryService(Registry& registry, std::shared_ptr<const Authorizer> auth)
      : registry_(registry), auth_(std::move(auth)) {}

  grpc::Status Register(grpc::ServerContext* ctx, const pb::RegisterRequest* req,
                        pb::RevisionReply* reply) override {
    if (Status s = CheckWrite(*ctx, req->service()); !s.ok()) return ToGrpc(s);
    auto spec = FromProto(req->spec());
    if (!spec.ok()) return ToGrpc(spec.status());
    return Reply(registry_.Register(req->service(), req->id(), *spec), reply);
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const pb::HeartbeatRequest* req,
                         pb::RevisionReply* reply) override {
    if (Status s = CheckWrite(*ctx, req->service()); !s.ok()) return ToGrpc(s);
    return Reply(registry_.Heartbeat(req->service(), req->id(), req->generation()), reply);
  }

  grpc::Status SetState(grpc::ServerContext* ctx, const pb::SetStateRequest* req,
                        pb::RevisionReply* reply) override {
    if (Status s = CheckWrite(*ctx, req->service()); !s.ok()) return ToGrpc(s);
    std::optional<InstanceState> state;
    if (req->state() != pb::STATE_UNSPECIFIED) {
      auto parsed = FromProto(req->state());
      if (!parsed.ok()) return ToGrpc(parsed.status());
      state = *parsed;
    }
    std::optional<bool> accepting;
    if (req->has_accepting()) accepting = req->accepting();
    if (!state && !accepting) {
      return ToGrpc(InvalidArgumentError("give 'state' and/or 'accepting'"));
    }
    return Reply(registry_.SetState(req->service(), req->id(), req->generation(), state, accepting),
                 reply);
  }

  grpc::Status Deregister(grpc::ServerContext* ctx, const pb::DeregisterRequest* req,
                          pb::RevisionReply* reply) override {
    if (Status s = CheckWrite(*ctx, req->service()); !s.ok()) return ToGrpc(s);
    return Reply(registry_.Deregister(req->service(), req->id(), req->generation()), reply);
  }

  grpc::Status List(grpc::ServerContext* ctx, const pb::ListRequest* req,
                    pb::ListReply* reply) override {
    if (Status s = CheckRead(*ctx); !s.ok()) return ToGrpc(s);
    auto list = registry_.List(req->service());
    if (!list.ok()) return ToGrpc(list.status());
    reply->set_revision(list->revision);
    reply->set_degraded(list->degraded);
    for (const Instance& in : list->instances) ToProto(in, reply->add_instances());
    return grpc::Status::OK;
  }

  grpc::Status Watch(grpc::ServerContext* ctx, const pb::WatchRequest* req,
                     grpc::ServerWriter<pb::Event>* writer) override {
    if (Status s = CheckRead(*ctx); !s.ok()) return ToGrpc(s);
    auto watcher = registry_.Watch(req->from_revision(), req->service());
    if (!watcher.ok()) return ToGrpc(watcher.status());
    std::shared_ptr<Watcher> w = *watcher;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "registry is stopping");
      watches_.insert(w);
    }
    pb::Event event;
    bool open = true;
    while (open && !ctx->IsCancelled()) {
      // A short wait, so a client that went away is noticed within it.
      auto batch = w->Next(std::chrono::milliseconds(200));
      if (!batch.ok()) break;  // cancelled by Stop()
      for (const Event& e : *batch) {
        event.Clear();
        ToProto(e, &event);
        if (!writer->Write(event)) {
          open = false;
          break;
        }
      }
    }
    w->Cancel();
    std::lock_guard lock(mu_);
    watches_.erase(w);
    // Ended by Stop(): UNAVAILABLE tells the client to reconnect (to this or another registry).
    if (stopping_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "registry is stopping");
    return grpc::Status::OK;
  }

  void CancelWatches() {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (const auto& w : watches_) w->Cancel();
  }

 private:
  static std::string_view Authorization(const grpc::ServerContext& ctx) {
    const auto& metadata = ctx.client_metadata();
    auto it = metadata.find("authorization");
    if (it == metadata.end()) return {};
    return std::string_view(it->second.data(), it->second.size());
  }
  Status CheckRead(const grpc::ServerContext& ctx) const {
    if (!auth_) return Status::Ok();
    return auth_->Authenticate(Authorization(ctx)).status();
  }
  Status CheckWrite(const grpc::ServerContext& ctx, const std::string& service) const {
    if (!auth_) return Status::Ok();
    return auth_->AuthorizeWrite(Authorization(ctx), service);
  }

  Registry& registry_;
  const std::shared_ptr<const Authorizer> auth_;
  std::mutex mu_;
  std::set<std::shared_ptr<Watcher>> watches_;  // guarded by mu_
  bool stopping_ = false;                       // guarded by mu_
};

struct GrpcServer::Impl {
  std::unique_ptr<RegistryService> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::once_flag stop_once;
};

Result<std::unique_ptr<GrpcServer>> GrpcServer::Start(Registry& registry, GrpcOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->service = std::make_unique<RegistryService>(registry, options.auth);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &impl->port);
  // Without this a second registry could bind the same port and silently take half the clients.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(impl->service.get());
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    return UnavailableError("cannot listen for gRPC on " + options.address);
  }
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(impl)));
}

GrpcServer::GrpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GrpcServer::~GrpcServer() { Stop(); }

int GrpcServer::port() const { return impl_->port; }

void GrpcServer::Stop() {
  std::call_once(impl_->stop_once, [this] {
    impl_->service->CancelWatches();
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    impl_->server->Wait();
  });
}

}  // namespace drover::registry
