#include "registry/grpc_api.h"

#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <set>

#include "common/tokens.h"
#include "drover/discovery.h"
#include "drover/mutex.h"
#include "drover/registry/v1/registry.pb.h"
#include "net/grpc_server.h"
#include "net/sockets.h"
#include "registry/client_limits.h"
#include "registry/encoding_cache.h"
#include "registry/json_codec.h"
#include "registry/registry.h"

namespace drover::registry {

namespace pb = ::drover::registry::v1;

namespace {

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

void DeployToProto(const StoredDeploy& d, pb::Deploy* out) {
  out->set_id(d.id);
  out->set_service(d.service);
  out->set_version(d.version);
  out->set_active(d.active);
  out->set_created_ms(d.created_ms);
  out->set_record_json(d.record);
}

using Call = std::shared_ptr<net::GrpcCall>;

// Appends `message` to `out` as field `field` of an enclosing message (length-delimited).
void AppendMessageField(int field, const google::protobuf::MessageLite& message, std::string& out) {
  using google::protobuf::io::CodedOutputStream;
  constexpr std::uint32_t kLengthDelimited = 2;     // the wire type of an embedded message
  const std::size_t size = message.ByteSizeLong();  // caches the sizes the write below uses
  std::uint8_t head[10];
  std::uint8_t* end = CodedOutputStream::WriteVarint32ToArray(
      static_cast<std::uint32_t>(field) << 3 | kLengthDelimited, head);
  end = CodedOutputStream::WriteVarint32ToArray(static_cast<std::uint32_t>(size), end);
  out.append(reinterpret_cast<const char*>(head), static_cast<std::size_t>(end - head));
  const std::size_t at = out.size();
  out.resize(at + size);
  message.SerializeWithCachedSizesToArray(reinterpret_cast<std::uint8_t*>(out.data() + at));
}

// Answers `call` with `message`, serialized.
void Answer(const Call& call, const google::protobuf::Message& message) {
  call->Reply(message.SerializeAsString());
}

// A write's answer once the registry committed it (or refused it): any thread.
void AnswerRevision(const Call& call, const Result<std::uint64_t>& revision) {
  if (!revision.ok()) return call->Finish(revision.status());
  pb::RevisionReply reply;
  reply.set_revision(*revision);
  Answer(call, reply);
}

// The request as `Request`, or the call ends INVALID_ARGUMENT.
template <typename Request>
bool Parse(const Call& call, std::string_view bytes, Request& request) {
  if (request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return true;
  call->Finish(InvalidArgumentError("malformed " + request.GetTypeName()));
  return false;
}

constexpr char kPrefix[] = "/drover.registry.v1.Registry/";

}  // namespace

// The API's methods, each a handler on the connection's io thread (net::GrpcServer): reads and
// lease renewals answer inline (memory only); writes that commit are queued to the registry's
// writer, and answered once they are durable (a group commit's replies
// together, and each connection's answers leave in one write). Watch and KeepAlive are streams
// on the same threads (WatchStream, KeepAliveStream below).
class RegistryService {
 public:
  RegistryService(Registry& registry, std::shared_ptr<const Authorizer> auth,
                  std::shared_ptr<ClientLimits> limits)
      : registry_(registry),
        auth_(std::move(auth)),
        limits_(limits ? std::move(limits) : std::make_shared<ClientLimits>()) {}

  std::vector<net::GrpcMethod> Methods();

  // Ends every watch (UNAVAILABLE) and keepalive stream (CANCELLED); refuses new ones.
  void EndStreams();

 private:
  class WatchStream;
  class KeepAliveStream;

  void Register(const Call& call, std::string_view bytes) {
    pb::RegisterRequest req;
    if (!Parse(call, bytes, req)) return;
    if (Status s = AdmitWrite(*call, req.service()); !s.ok()) return call->Finish(s);
    auto spec = FromProto(req.spec());
    if (!spec.ok()) return call->Finish(spec.status());
    registry_.RegisterAsync(req.service(), req.id(), std::move(*spec),
                            [call](Result<std::uint64_t> r) { AnswerRevision(call, r); });
  }

  void Heartbeat(const Call& call, std::string_view bytes) {
    pb::HeartbeatRequest req;
    if (!Parse(call, bytes, req)) return;
    if (Status s = AdmitWrite(*call, req.service()); !s.ok()) return call->Finish(s);
    AnswerRevision(call, registry_.Heartbeat(req.service(), req.id(), req.generation()));
  }

  void SetState(const Call& call, std::string_view bytes) {
    pb::SetStateRequest req;
    if (!Parse(call, bytes, req)) return;
    if (Status s = AdmitWrite(*call, req.service()); !s.ok()) return call->Finish(s);
    std::optional<InstanceState> state;
    if (req.state() != pb::STATE_UNSPECIFIED) {
      auto parsed = FromProto(req.state());
      if (!parsed.ok()) return call->Finish(parsed.status());
      state = *parsed;
    }
    std::optional<bool> accepting;
    if (req.has_accepting()) accepting = req.accepting();
    if (!state && !accepting) {
      return call->Finish(InvalidArgumentError("give 'state' and/or 'accepting'"));
    }
    registry_.SetStateAsync(req.service(), req.id(), req.generation(), state, accepting,
                            [call](Result<std::uint64_t> r) { AnswerRevision(call, r); });
  }

  void Deregister(const Call& call, std::string_view bytes) {
    pb::DeregisterRequest req;
    if (!Parse(call, bytes, req)) return;
    if (Status s = AdmitWrite(*call, req.service()); !s.ok()) return call->Finish(s);
    registry_.DeregisterAsync(req.service(), req.id(), req.generation(),
                              [call](Result<std::uint64_t> r) { AnswerRevision(call, r); });
  }

  void List(const Call& call, std::string_view bytes) {
    pb::ListRequest req;
    if (!Parse(call, bytes, req)) return;
    if (Status s = CheckRead(*call); !s.ok()) return call->Finish(s);
    // Each instance encoded straight into the reply's bytes, through one pb::Instance reused,
    // rather than copied out of the registry and then into a ListReply: a list of 100,000 took
    // the io thread ~0.55 s that way, most of it page faults on the copies' fresh memory; ~0.18 s
    // this way.
    std::string reply;
    pb::Instance scratch;
    auto head =
        registry_.VisitList(req.service(), [&](const Instance& in, Duration, std::size_t count) {
          scratch.Clear();
          ToProto(in, &scratch);
          // Sized once, by the first instance's size (and a margin): no copies as it grows.
          if (reply.empty()) reply.reserve(count * (scratch.ByteSizeLong() + 16) * 9 / 8);
          AppendMessageField(pb::ListReply::kInstancesFieldNumber, scratch, reply);
        });
    if (!head.ok()) return call->Finish(head.status());
    pb::ListReply rest;  // a message's fields may come in any order
    rest.set_revision(head->revision);
    rest.set_degraded(head->degraded);
    rest.AppendToString(&reply);
    call->Reply(std::move(reply));
  }

  // Deploys: rare and small, made on the registry's deploy thread (which may wait for a store).
  void GetDeploy(const Call& call, std::string_view bytes) {
    pb::GetDeployRequest req;
    if (!Parse(call, bytes, req)) return;
    if (Status s = CheckRead(*call); !s.ok()) return call->Finish(s);
    registry_.GetDeployAsync(req.id(), [call, id = req.id()](auto found) {
      if (!found.ok()) return call->Finish(found.status());
      if (!*found) return call->Finish(NotFoundError("no deploy " + id));
      pb::Deploy reply;
      DeployToProto(**found, &reply);
      Answer(call, reply);
    });
  }

  void ListDeploys(const Call& call, std::string_view bytes) {
    pb::ListDeploysRequest req;
    if (!Parse(call, bytes, req)) return;
    if (Status s = CheckRead(*call); !s.ok()) return call->Finish(s);
    const std::size_t limit = req.limit() == 0 ? 50 : std::min<std::size_t>(req.limit(), 200);
    registry_.ListDeploysAsync(req.service(), limit, [call](auto list) {
      if (!list.ok()) return call->Finish(list.status());
      pb::ListDeploysReply reply;
      for (const StoredDeploy& d : *list) DeployToProto(d, reply.add_deploys());
      Answer(call, reply);
    });
  }

  void PutDeploy(const Call& call, std::string_view bytes) {
    pb::PutDeployRequest req;
    if (!Parse(call, bytes, req)) return;
    auto d = DeployFromRecord(req.id(), req.record_json(), req.active());
    if (!d.ok()) return call->Finish(d.status());
    // Recording a deploy is deploying: the same right the agents ask for.
    if (auth_) {
      if (Status s = auth_->AuthorizeDeploy(Authorization(*call), d->service); !s.ok()) {
        return call->Finish(s);
      }
    }
    registry_.PutDeployAsync(std::move(*d), req.expect_version(), [call](auto version) {
      if (!version.ok()) return call->Finish(version.status());
      pb::PutDeployReply reply;
      reply.set_version(*version);
      Answer(call, reply);
    });
  }

  void Watch(const Call& call, std::string_view bytes);
  void OpenKeepAlive(const Call& call);
  void Forget(const std::shared_ptr<WatchStream>& stream);

  static std::string_view Authorization(const net::GrpcCall& call) {
    return call.Metadata("authorization");
  }
  Status CheckRead(const net::GrpcCall& call) const {
    if (!auth_) return Status::Ok();
    return auth_->Authenticate(Authorization(call)).status();
  }
  Status CheckWrite(const net::GrpcCall& call, const std::string& service) const {
    if (!auth_) return Status::Ok();
    return auth_->AuthorizeWrite(Authorization(call), service);
  }
  // Who limits count against: the token when tokens are checked, else the connection.
  std::string LimitIdentity(const net::GrpcCall& call) const {
    return ClientIdentity(auth_ ? auth_->Authenticate(Authorization(call)) : std::string(),
                          net::EndpointText(call.peer()));
  }
  // One write against the client's rate.
  Status TakeWrite(const net::GrpcCall& call) {
    if (!limits_->limits_writes()) return Status::Ok();
    return limits_->TakeWriteToken(LimitIdentity(call));
  }
  Status AdmitWrite(const net::GrpcCall& call, const std::string& service) {
    DROVER_RETURN_IF_ERROR(CheckWrite(call, service));
    return TakeWrite(call);
  }

  Registry& registry_;
  const std::shared_ptr<const Authorizer> auth_;
  const std::shared_ptr<ClientLimits> limits_;
  Mutex mu_;
  std::set<std::shared_ptr<WatchStream>> watches_ DROVER_GUARDED_BY(mu_);
  std::set<std::shared_ptr<KeepAliveStream>> keepalives_ DROVER_GUARDED_BY(mu_);
  bool stopping_ DROVER_GUARDED_BY(mu_) = false;
};

// A Watch stream: its Watcher's listener (which runs under the registry's locks) only wakes the
// call; the wake-up runs on the connection's io thread, takes what the watcher queued and writes
// it -- each event encoded once per io thread (the newest 256 kept), and the same bytes shared by
// every stream that sends it. A stream whose client reads slowly holds at kBacklog bytes handed
// to HTTP/2 and leaves the rest in its watcher's queue until they drain.
class RegistryService::WatchStream : public std::enable_shared_from_this<WatchStream> {
 public:
  static constexpr std::size_t kBacklog = 256 * 1024;

  WatchStream(RegistryService& service, const Call& call, std::shared_ptr<Watcher> watcher,
              WatchSlot slot)
      : service_(service), call_(call), watcher_(std::move(watcher)), slot_(std::move(slot)) {}

  // The connection's thread: writes what is queued, or ends the stream once the watcher is
  // cancelled (the registry stops).
  void Pump() {
    const Call call = call_.lock();
    if (!call || ended_) return;
    while (true) {
      if (call->backlog_bytes() > kBacklog) return call->WakeWhenDrained();
      if (!watcher_->TakeQueued(pending_).ok()) {
        call->Finish(UnavailableError("registry is stopping"));
        return End();
      }
      if (pending_.empty()) return;
      for (EventPtr& event : pending_) {
        call->Write(Encoded(event));
        event.reset();
      }
    }
  }

  // The stream is over (ended here, cancelled, or its client gone): its watch slot is freed and
  // its Watcher cancelled, after which the listener never runs again.
  void End() {
    if (std::exchange(ended_, true)) return;
    watcher_->Cancel();
    slot_.Release();
    service_.Forget(shared_from_this());
  }

  void Cancel() { watcher_->Cancel(); }  // any thread: the next Pump ends the stream

 private:
  static std::shared_ptr<const std::string> Encoded(const EventPtr& event) {
    thread_local EncodingCache<std::shared_ptr<const std::string>> cache(256);
    return cache.Get(event, [](const Event& e) {
      pb::Event message;
      ToProto(e, &message);
      return std::make_shared<const std::string>(message.SerializeAsString());
    });
  }

  RegistryService& service_;
  const std::weak_ptr<net::GrpcCall> call_;
  const std::shared_ptr<Watcher> watcher_;
  WatchSlot slot_;
  std::vector<EventPtr> pending_;  // the connection's thread only
  bool ended_ = false;             // the connection's thread only
};

// A KeepAlive stream: each message renews its heartbeats' leases (each authorised as a unary
// call would be, the permitted ones under one registry lock) and is answered at once, on the
// connection's thread. A client that sends without reading the replies is cut off once
// kBacklog bytes of them wait (RESOURCE_EXHAUSTED) rather than growing the queue without bound.
class RegistryService::KeepAliveStream {
 public:
  static constexpr int kMaxHeartbeats = 10'000;
  static constexpr std::size_t kBacklog = 1024 * 1024;

  KeepAliveStream(RegistryService& service, const Call& call) : service_(service), call_(call) {}

  void OnMessage(const Call& call, std::string_view bytes) {
    pb::KeepAliveRequest request;
    if (!Parse(call, bytes, request)) return;
    if (request.heartbeats_size() > kMaxHeartbeats) {
      return call->Finish(InvalidArgumentError("at most " + std::to_string(kMaxHeartbeats) +
                                               " heartbeats per KeepAlive message"));
    }
    if (call->backlog_bytes() > kBacklog) {
      return call->Finish(
          Status(StatusCode::kResourceExhausted, "KeepAlive replies are not being read"));
    }
    call->Write(std::make_shared<const std::string>(Renew(*call, request).SerializeAsString()));
  }

  void Cancel() {  // any thread
    if (const Call call = call_.lock()) call->Finish(CancelledError("registry is stopping"));
  }

 private:
  // The message is one write against the client's rate: over it, every heartbeat in it is
  // RESOURCE_EXHAUSTED.
  pb::KeepAliveReply Renew(const net::GrpcCall& call, const pb::KeepAliveRequest& request) {
    const int n = request.heartbeats_size();
    std::vector<Status> denied(static_cast<std::size_t>(n));
    renewals_.clear();
    const Status limited = service_.TakeWrite(call);
    for (int i = 0; i < n; ++i) {
      const pb::HeartbeatRequest& hb = request.heartbeats(i);
      denied[static_cast<std::size_t>(i)] =
          limited.ok() ? service_.CheckWrite(call, hb.service()) : limited;
      if (!denied[static_cast<std::size_t>(i)].ok()) continue;
      renewals_.push_back(LeaseRenewal{hb.service(), hb.id(), hb.generation()});
    }
    pb::KeepAliveReply reply;
    reply.set_revision(service_.registry_.HeartbeatAll(renewals_, results_));
    std::size_t next = 0;
    for (const Status& refusal : denied) {
      const Status& s = refusal.ok() ? results_[next++] : refusal;
      pb::HeartbeatResult* out = reply.add_results();
      out->set_code(static_cast<int>(s.code()));
      if (!s.ok()) out->set_message(s.message());
    }
    return reply;
  }

  RegistryService& service_;
  const std::weak_ptr<net::GrpcCall> call_;
  std::vector<LeaseRenewal> renewals_;  // the connection's thread only
  std::vector<Status> results_;         // the connection's thread only
};

// A call arrived: admit it, open its Watcher and send the headers, which carry the registry's
// revision: the client knows its watch is in place even while nothing changes (a client failing
// over measures its gap by this).
void RegistryService::Watch(const Call& call, std::string_view bytes) {
  if (Status s = CheckRead(*call); !s.ok()) return call->Finish(s);
  pb::WatchRequest request;
  if (!Parse(call, bytes, request)) return;
  const std::string client = LimitIdentity(*call);
  if (Status s = limits_->AcquireWatch(client); !s.ok()) return call->Finish(s);
  WatchSlot slot(limits_, client);
  auto watcher = registry_.Watch(request.from_revision(), request.service());
  if (!watcher.ok()) return call->Finish(watcher.status());
  auto stream = std::make_shared<WatchStream>(*this, call, *watcher, std::move(slot));
  bool admitted = false;
  {
    MutexLock lock(mu_);
    admitted = !stopping_;
    if (admitted) watches_.insert(stream);
  }
  if (!admitted) {
    (*watcher)->Cancel();
    return call->Finish(UnavailableError("registry is stopping"));
  }
  call->SendHeaders({{kWatchAcceptedHeader, std::to_string(registry_.revision())}});
  call->OnWake([weak = std::weak_ptr<WatchStream>(stream)] {
    if (auto s = weak.lock()) s->Pump();
  });
  call->OnCancel([weak = std::weak_ptr<WatchStream>(stream)] {
    if (auto s = weak.lock()) s->End();
  });
  call->context = stream;
  (*watcher)->SetListener([weak = std::weak_ptr<net::GrpcCall>(call)] {
    if (auto c = weak.lock()) c->Notify();
  });
  call->Notify();  // what the watcher already holds (a replay from an earlier revision)
}

void RegistryService::OpenKeepAlive(const Call& call) {
  if (Status s = CheckRead(*call); !s.ok()) return call->Finish(s);
  auto stream = std::make_shared<KeepAliveStream>(*this, call);
  {
    MutexLock lock(mu_);
    if (stopping_) return call->Finish(CancelledError("registry is stopping"));
    keepalives_.insert(stream);
  }
  call->OnClose([this, weak = std::weak_ptr<KeepAliveStream>(stream)] {
    if (auto s = weak.lock()) {
      MutexLock lock(mu_);
      keepalives_.erase(s);
    }
  });
  call->context = stream;
}

void RegistryService::Forget(const std::shared_ptr<WatchStream>& stream) {
  MutexLock lock(mu_);
  watches_.erase(stream);
}

void RegistryService::EndStreams() {
  std::vector<std::shared_ptr<WatchStream>> watches;
  std::vector<std::shared_ptr<KeepAliveStream>> keepalives;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    watches.assign(watches_.begin(), watches_.end());
    keepalives.assign(keepalives_.begin(), keepalives_.end());
  }
  // Outside the lock: a cancelled watcher's listener wakes its stream at once.
  for (const auto& w : watches) w->Cancel();
  for (const auto& k : keepalives) k->Cancel();
}

std::vector<net::GrpcMethod> RegistryService::Methods() {
  using Kind = net::GrpcMethod::Kind;
  std::vector<net::GrpcMethod> methods;
  const auto unary = [&](const char* name,
                         void (RegistryService::*handler)(const Call&, std::string_view)) {
    net::GrpcMethod m;
    m.path = std::string(kPrefix) + name;
    m.kind = Kind::kUnary;
    m.on_request = [this, handler](const Call& call, std::string_view bytes) {
      (this->*handler)(call, bytes);
    };
    methods.push_back(std::move(m));
  };
  unary("Register", &RegistryService::Register);
  unary("Heartbeat", &RegistryService::Heartbeat);
  unary("SetState", &RegistryService::SetState);
  unary("Deregister", &RegistryService::Deregister);
  unary("List", &RegistryService::List);
  unary("GetDeploy", &RegistryService::GetDeploy);
  unary("ListDeploys", &RegistryService::ListDeploys);
  unary("PutDeploy", &RegistryService::PutDeploy);

  net::GrpcMethod watch;
  watch.path = std::string(kPrefix) + "Watch";
  watch.kind = Kind::kServerStreaming;
  watch.on_request = [this](const Call& call, std::string_view bytes) { Watch(call, bytes); };
  methods.push_back(std::move(watch));

  net::GrpcMethod keepalive;
  keepalive.path = std::string(kPrefix) + "KeepAlive";
  keepalive.kind = Kind::kBidiStreaming;
  keepalive.on_open = [this](const Call& call) { OpenKeepAlive(call); };
  keepalive.on_request = [](const Call& call, std::string_view bytes) {
    if (auto stream = std::static_pointer_cast<KeepAliveStream>(call->context)) {
      stream->OnMessage(call, bytes);
    }
  };
  keepalive.on_half_close = [](const Call& call) { call->Finish(Status::Ok()); };
  methods.push_back(std::move(keepalive));
  return methods;
}

struct GrpcServer::Impl {
  std::unique_ptr<RegistryService> service;
  std::unique_ptr<net::GrpcServer> server;
  std::once_flag stop_once;
};

Result<std::unique_ptr<GrpcServer>> GrpcServer::Start(Registry& registry, GrpcOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->service = std::make_unique<RegistryService>(registry, options.auth, options.limits);
  net::GrpcServerOptions server;
  server.name = "grpc-registry";
  server.address = options.address;
  server.max_connections = options.max_connections;
  server.tls_cert_file = options.tls_cert_file;
  server.tls_key_file = options.tls_key_file;
  auto started = net::GrpcServer::Start(std::move(server), impl->service->Methods());
  if (!started.ok()) {
    if (started.status().code() == StatusCode::kInvalidArgument) return started.status();
    return UnavailableError("cannot listen for gRPC on " + options.address + ": " +
                            started.status().message());
  }
  impl->server = std::move(*started);
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(impl)));
}

GrpcServer::GrpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GrpcServer::~GrpcServer() { Stop(); }

int GrpcServer::port() const { return impl_->server->port(); }

void GrpcServer::Stop() {
  std::call_once(impl_->stop_once, [this] {
    impl_->service->EndStreams();
    impl_->server->Stop(std::chrono::seconds(5));
  });
}

}  // namespace drover::registry
