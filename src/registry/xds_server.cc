#include "registry/xds_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/host_port.h"
#include "common/thread_name.h"
#include "drover/mutex.h"
#include "envoy/service/discovery/v3/ads.grpc.pb.h"
#include "registry/client_limits.h"
#include "registry/registry.h"
#include "registry/xds_resources.h"

namespace drover::registry {

namespace discovery = envoy::service::discovery::v3;

namespace {

constexpr auto kWatchPoll = std::chrono::milliseconds(500);

// "ipv4:10.0.0.5:5000" / "ipv6:[::1]:5000" -> "10.0.0.5" / "::1"; "" for anything else.
std::string PeerIp(const std::string& peer) {
  const std::string connection = ConnectionOfPeer(peer);
  auto parsed = ParseHostPort(connection, "peer");
  return parsed.ok() && parsed->is_ip() ? parsed->host : std::string();
}

}  // namespace

class AdsStream;

// What a stream shares with the server: the session, and the right to start the call's next write
// or its finish (held by one thread at a time, see Pump). Lives as long as either holds it.
struct StreamCore {
  explicit StreamCore(std::string peer_address)
      : peer(std::move(peer_address)), client(ConnectionOfPeer(peer)), session(peer) {}

  const std::string peer;
  const std::string client;  // the connection: what the per-client stream count is kept by
  Mutex mu;
  XdsSession session DROVER_GUARDED_BY(mu);
  AdsStream* reactor DROVER_GUARDED_BY(mu) = nullptr;  // null once the call is done
  bool writing DROVER_GUARDED_BY(mu) = false;          // a write (or the finish) is started
  bool finished DROVER_GUARDED_BY(mu) = false;
  std::optional<grpc::Status> finish_with DROVER_GUARDED_BY(mu);
  std::uint64_t requests DROVER_GUARDED_BY(mu) = 0;
  grpc::ByteBuffer out;  // the write in flight; touched only by the writing thread
};

struct XdsServer::Impl {
  Impl(Registry& r, XdsOptions o)
      : registry(r),
        options(std::move(o)),
        counters_ptr(options.counters ? options.counters : std::make_shared<XdsCounters>()),
        counters(*counters_ptr) {}

  void Publish(std::shared_ptr<const XdsSnapshot> snapshot) DROVER_EXCLUDES(mu);
  void Remove(const std::shared_ptr<StreamCore>& core) DROVER_EXCLUDES(mu);
  void RunPublisher(std::stop_token stop);

  Registry& registry;
  const XdsOptions options;
  std::shared_ptr<XdsCounters> counters_ptr;
  XdsCounters& counters;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<grpc::Service> service;
  int port = 0;
  std::jthread publisher;
  std::once_flag stop_once;

  Mutex mu;
  std::shared_ptr<const XdsSnapshot> snapshot DROVER_GUARDED_BY(mu);
  std::set<std::shared_ptr<StreamCore>> streams DROVER_GUARDED_BY(mu);
  std::map<std::string, std::size_t> per_client DROVER_GUARDED_BY(mu);
  bool stopping DROVER_GUARDED_BY(mu) = false;
};

// One ADS call. gRPC owns it until OnDone; every decision to write or finish is taken under the
// core's lock by whoever sets `writing`, and the call itself is made outside it (gRPC may run a
// reaction inline inside StartWrite). The method is registered raw: a request that does not
// decode is refused with INVALID_ARGUMENT naming it, where gRPC's own decoding would end the read
// side as if the client had closed it.
class AdsStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  AdsStream(XdsServer::Impl& server, std::shared_ptr<StreamCore> core)
      : server_(server), core_(std::move(core)) {
    {
      MutexLock lock(core_->mu);
      core_->reactor = this;
    }
    StartRead(&request_);
    Pump(core_);  // Stop() may have asked for the finish before the reactor existed
  }

  // Refused at the door: finished at once with `status`.
  static AdsStream* Refuse(XdsServer::Impl& server, const std::string& peer, grpc::Status status) {
    auto* stream = new AdsStream(server, std::make_shared<StreamCore>(peer), true);
    stream->Finish(std::move(status));
    return stream;
  }

  // Something may be there to send (a new snapshot, a request answered): starts the next write
  // unless one is under way; or the finish, once asked for and no write is under way.
  static void Pump(const std::shared_ptr<StreamCore>& core) {
    AdsStream* reactor = nullptr;
    std::optional<grpc::Status> finish;
    {
      MutexLock lock(core->mu);
      if (core->writing || core->finished || core->reactor == nullptr) return;
      if (core->finish_with) {
        core->finished = true;
        finish = core->finish_with;
      } else {
        auto next = core->session.Next();
        if (!next) return;
        bool own = false;
        core->out.Clear();
        if (!grpc::SerializationTraits<discovery::DiscoveryResponse>::Serialize(*next, &core->out,
                                                                                &own)
                 .ok()) {
          return;  // cannot happen for a message we built; nothing sensible to send
        }
        core->writing = true;
      }
      reactor = core->reactor;
    }
    if (finish) {
      reactor->Finish(*finish);
    } else {
      reactor->server_.counters.responses.fetch_add(1, std::memory_order_relaxed);
      reactor->StartWrite(&core->out);
    }
  }

  static void FinishWith(const std::shared_ptr<StreamCore>& core, grpc::Status status) {
    {
      MutexLock lock(core->mu);
      if (!core->finish_with) core->finish_with = std::move(status);
    }
    Pump(core);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed or went away
      FinishWith(core_, grpc::Status::OK);
      return;
    }
    discovery::DiscoveryRequest request;
    const grpc::Status decoded =
        grpc::SerializationTraits<discovery::DiscoveryRequest>::Deserialize(&request_, &request);
    std::uint64_t nacks = 0;
    std::uint64_t number = 0;
    {
      MutexLock lock(core_->mu);
      number = ++core_->requests;
      if (decoded.ok()) {
        const std::uint64_t before = core_->session.nacks();
        core_->session.OnRequest(request);
        nacks = core_->session.nacks() - before;
      }
    }
    if (!decoded.ok()) {
      spdlog::warn(
          "registry xds: {} sent a message that is not a DiscoveryRequest (message {} of "
          "its stream); stream ended",
          core_->peer, number);
      FinishWith(core_, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                     "message " + std::to_string(number) +
                                         " of this stream is not an "
                                         "envoy.service.discovery.v3.DiscoveryRequest"));
      return;
    }
    if (nacks > 0) server_.counters.nacks.fetch_add(nacks, std::memory_order_relaxed);
    Pump(core_);
    {
      MutexLock lock(core_->mu);
      if (core_->finished) return;  // no read after the finish
    }
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    {
      MutexLock lock(core_->mu);
      core_->writing = false;
      if (!ok && !core_->finish_with) core_->finish_with = grpc::Status::OK;  // the client left
    }
    Pump(core_);
  }

  void OnCancel() override { FinishWith(core_, grpc::Status::CANCELLED); }

  void OnDone() override {
    {
      MutexLock lock(core_->mu);
      core_->reactor = nullptr;
    }
    if (!refused_) {
      server_.Remove(core_);
      spdlog::debug("registry xds: stream from {} ended", core_->peer);
    }
    delete this;
  }

 private:
  AdsStream(XdsServer::Impl& server, std::shared_ptr<StreamCore> core, bool refused)
      : server_(server), core_(std::move(core)), refused_(refused) {}

  XdsServer::Impl& server_;
  std::shared_ptr<StreamCore> core_;
  const bool refused_ = false;
  grpc::ByteBuffer request_;
};

namespace {

class AdsService final
    : public discovery::AggregatedDiscoveryService::WithRawCallbackMethod_StreamAggregatedResources<
          discovery::AggregatedDiscoveryService::Service> {
 public:
  explicit AdsService(XdsServer::Impl& server) : server_(server) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StreamAggregatedResources(
      grpc::CallbackServerContext* context) override {
    const std::string peer = context->peer();
    const std::string ip = PeerIp(peer);
    if (!server_.options.allow.empty() && !AnyContains(server_.options.allow, ip)) {
      server_.counters.refused_streams.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("registry xds: refused a stream from {}: not in --xds-allow", peer);
      return AdsStream::Refuse(server_, peer,
                               grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                            "this address may not use the registry's xDS server "
                                            "(--xds-allow)"));
    }
    auto core = std::make_shared<StreamCore>(peer);
    const std::string& client = core->client;
    std::shared_ptr<const XdsSnapshot> snapshot;
    {
      MutexLock lock(server_.mu);
      std::string why;
      if (server_.stopping) {
        why = "the registry is stopping";
      } else if (server_.streams.size() >= server_.options.max_streams) {
        why = "the registry holds " + std::to_string(server_.options.max_streams) +
              " xDS streams, its limit (--xds-max-streams)";
      } else if (server_.per_client[client] >= server_.options.max_streams_per_client) {
        why = "this connection holds " + std::to_string(server_.options.max_streams_per_client) +
              " xDS streams, the limit per client (--xds-max-streams-per-client)";
      }
      if (!why.empty()) {
        if (server_.per_client[client] == 0) server_.per_client.erase(client);
        server_.counters.refused_streams.fetch_add(1, std::memory_order_relaxed);
        spdlog::warn("registry xds: refused a stream from {}: {}", peer, why);
        return AdsStream::Refuse(
            server_, peer,
            grpc::Status(server_.stopping ? grpc::StatusCode::UNAVAILABLE
                                          : grpc::StatusCode::RESOURCE_EXHAUSTED,
                         why));
      }
      ++server_.per_client[client];
      server_.streams.insert(core);
      server_.counters.streams.store(server_.streams.size(), std::memory_order_relaxed);
      snapshot = server_.snapshot;
    }
    {
      MutexLock lock(core->mu);
      core->session.OnSnapshot(std::move(snapshot));
    }
    spdlog::debug("registry xds: stream from {}", peer);
    return new AdsStream(server_, std::move(core));
  }

 private:
  XdsServer::Impl& server_;
};

}  // namespace

void XdsServer::Impl::Publish(std::shared_ptr<const XdsSnapshot> next) {
  std::vector<std::shared_ptr<StreamCore>> to_tell;
  {
    MutexLock lock(mu);
    snapshot = next;
    to_tell.assign(streams.begin(), streams.end());
  }
  counters.version.store(next->version, std::memory_order_relaxed);
  for (const auto& core : to_tell) {
    {
      MutexLock lock(core->mu);
      core->session.OnSnapshot(next);
    }
    AdsStream::Pump(core);
  }
}

void XdsServer::Impl::Remove(const std::shared_ptr<StreamCore>& core) {
  MutexLock lock(mu);
  if (streams.erase(core) == 0) return;
  if (auto it = per_client.find(core->client); it != per_client.end() && --it->second == 0) {
    per_client.erase(it);
  }
  counters.streams.store(streams.size(), std::memory_order_relaxed);
}

// Follows the registry from a RESYNC: the instances of every service, kept here; each batch of
// events rebuilds the services it touched and publishes a snapshot.
void XdsServer::Impl::RunPublisher(std::stop_token stop) {
  std::map<std::string, std::map<std::string, Instance>> instances;
  std::map<std::string, std::shared_ptr<const XdsServiceResources>, std::less<>> built;
  std::uint64_t version = 0;
  while (!stop.stop_requested()) {
    auto watcher = registry.Watch(0, "");
    if (!watcher.ok()) {
      // Clients keep the last snapshot meanwhile; trying again beats serving it forever.
      spdlog::error("registry xds: cannot watch the registry: {}; trying again in 1 s",
                    watcher.status().ToString());
      std::mutex m;
      std::unique_lock lock(m);
      std::condition_variable_any().wait_for(lock, stop, std::chrono::seconds(1),
                                             [] { return false; });
      continue;
    }
    while (!stop.stop_requested()) {
      auto events = (*watcher)->Next(kWatchPoll, stop);
      if (!events.ok()) break;  // cancelled, or stopping
      std::set<std::string> touched;
      for (const Event& e : *events) {
        switch (e.type) {
          case EventType::kResync:
            for (auto& [name, members] : instances) {
              touched.insert(name);
              members.clear();
            }
            for (const Instance& in : e.snapshot) {
              instances[in.service][in.id] = in;
              touched.insert(in.service);
            }
            break;
          case EventType::kPut:
            instances[e.instance.service][e.instance.id] = e.instance;
            touched.insert(e.instance.service);
            break;
          case EventType::kDelete:
            instances[e.instance.service].erase(e.instance.id);
            touched.insert(e.instance.service);
            break;
          case EventType::kProgress:
            break;
        }
      }
      if (touched.empty() && version > 0) continue;
      bool changed = version == 0;  // the first RESYNC is published even if empty
      for (const std::string& name : touched) {
        std::vector<Instance> members;
        for (const auto& [id, in] : instances[name]) members.push_back(in);
        auto resources =
            std::make_shared<const XdsServiceResources>(BuildXdsResources(name, members));
        // Skipped when nothing a client sees changed (a heartbeat-less re-registration, a
        // STARTING instance coming and going): no version, no push.
        auto old = built.find(name);
        if (old != built.end() && old->second->listener == resources->listener &&
            old->second->cluster == resources->cluster &&
            old->second->endpoints == resources->endpoints) {
          continue;
        }
        built[name] = std::move(resources);
        changed = true;
      }
      if (!changed) continue;
      auto next = std::make_shared<XdsSnapshot>();
      next->version = ++version;
      next->services = built;
      Publish(std::move(next));
    }
    if (!stop.stop_requested()) {
      spdlog::warn("registry xds: the registry watch ended; watching again");
    }
  }
}

Result<std::unique_ptr<XdsServer>> XdsServer::Start(Registry& registry, XdsOptions options) {
  DROVER_ASSIGN_OR_RETURN(
      HostPort address,
      ParseHostPort(options.address, "--xds", {.allow_port_zero = true, .require_ip = true}));
  auto impl = std::make_unique<Impl>(registry, std::move(options));
  impl->service = std::make_unique<AdsService>(*impl);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address.ToString(), grpc::InsecureServerCredentials(), &impl->port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // A client whose host died is let go: the stream's slot and its per-client count come back.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20'000);
  builder.RegisterService(impl->service.get());
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    return UnavailableError("cannot listen for xDS on " + address.ToString());
  }
  Impl* raw = impl.get();
  impl->publisher = std::jthread([raw](std::stop_token stop) {
    NameThisThread("xds-publisher");
    raw->RunPublisher(stop);
  });
  spdlog::info(
      "registry: xDS (ADS, v3) on {} for proxyless gRPC clients (xds:///<service>); read-only, no "
      "authentication{}",
      address.WithPort(static_cast<std::uint16_t>(impl->port)).ToString(),
      raw->options.allow.empty() ? std::string() : "; peers limited by --xds-allow");
  return std::unique_ptr<XdsServer>(new XdsServer(std::move(impl)));
}

XdsServer::XdsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

XdsServer::~XdsServer() { Stop(); }

int XdsServer::port() const { return impl_->port; }

const XdsCounters& XdsServer::counters() const { return impl_->counters; }

void XdsServer::Stop() {
  std::call_once(impl_->stop_once, [this] {
    Impl& d = *impl_;
    std::vector<std::shared_ptr<StreamCore>> open;
    {
      MutexLock lock(d.mu);
      d.stopping = true;
      open.assign(d.streams.begin(), d.streams.end());
    }
    for (const auto& core : open) {
      AdsStream::FinishWith(
          core, grpc::Status(grpc::StatusCode::UNAVAILABLE, "the registry is stopping"));
    }
    d.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    d.server->Wait();
    d.publisher.request_stop();
    if (d.publisher.joinable()) d.publisher.join();
  });
}

}  // namespace drover::registry
