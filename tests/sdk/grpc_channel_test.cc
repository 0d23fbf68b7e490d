// Seed 003's first experiment, in process on loopback: three WhoAmI gRPC servers behind an L4
// balancer (the Drover gateway's TCP listener, as a Kubernetes Service would be) and in the
// registry. A default channel to the one address pins one connection, so one server gets every
// call; the Drover channel balances round-robin over the registry's instances.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <thread>

#include "drover/examples/whoami/v1/whoami.grpc.pb.h"
#include "drover/grpc.h"
#include "gateway/gateway.h"
#include "registry/grpc_api.h"
#include "registry/registry.h"
#include "registry/sqlite_store.h"
#include "testing/eventually.h"
#include "testing/temp_dir.h"

namespace drover::grpc_defaults {
namespace {

using namespace std::chrono_literals;
namespace pb = drover::examples::whoami::v1;

class WhoAmIService final : public pb::WhoAmI::Service {
 public:
  explicit WhoAmIService(std::string id) : id_(std::move(id)) {}
  grpc::Status Who(grpc::ServerContext*, const pb::WhoRequest* req, pb::WhoReply* reply) override {
    if (req->delay_ms() > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(req->delay_ms()));
    reply->set_instance(id_);
    return grpc::Status::OK;
  }

 private:
  std::string id_;
};

struct WhoAmIServer {
  explicit WhoAmIServer(const std::string& id, const ServerOptions& options = {}) : service(id) {
    grpc::ServerBuilder builder;
    ConfigureServer(builder, options);
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~WhoAmIServer() { server->Shutdown(std::chrono::system_clock::now() + 1s); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }

  WhoAmIService service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

// Counts, per instance, the answers to `calls` calls on `channel`.
std::map<std::string, int> Count(const std::shared_ptr<grpc::Channel>& channel, int calls) {
  auto stub = pb::WhoAmI::NewStub(channel);
  std::map<std::string, int> per;
  for (int i = 0; i < calls; ++i) {
    grpc::ClientContext ctx;
    SetDeadline(ctx, ChannelOptions{});
    pb::WhoReply reply;
    const grpc::Status s = stub->Who(&ctx, pb::WhoRequest{}, &reply);
    ++per[s.ok() ? reply.instance() : "error: " + s.error_message()];
  }
  return per;
}

std::string Show(const std::map<std::string, int>& per) {
  std::string out;
  for (const auto& [id, n] : per) out += (out.empty() ? "" : ", ") + id + "=" + std::to_string(n);
  return out;
}

class GrpcChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = registry::SqliteStore::Open(dir_.path());
    ASSERT_TRUE(store.ok());
    registry_ = registry::Registry::Open(std::move(*store), clock_).value();
    registry::GrpcOptions options;
    options.address = "127.0.0.1:0";
    server_ = registry::GrpcServer::Start(*registry_, options).value();
    registry_address_ = "127.0.0.1:" + std::to_string(server_->port());
  }
  void TearDown() override { server_->Stop(); }

  void Register(const std::string& id, const std::string& address,
                const std::string& service = "whoami") {
    registry::InstanceSpec spec;
    spec.address = address;
    spec.generation = 1;
    spec.state = registry::InstanceState::kReady;
    spec.ttl_ms = 60'000;
    ASSERT_TRUE(registry_->Register(service, id, spec).ok());
  }

  // An L4 balancer in front of the "whoami" instances: a TCP listener of the gateway with
  // per-connection P2C and no slow start (as a Kubernetes Service would be). Waits until it
  // routes to `instances` instances.
  std::unique_ptr<gateway::Gateway> L4Balancer(std::size_t instances,
                                               const std::string& service = "whoami") {
    gateway::GatewayConfig c;
    c.registry = registry_address_;
    c.threads = 1;
    c.admin = "";
    c.drain = 1s;
    gateway::ListenerConfig l;
    l.name = "whoami";
    l.address = "127.0.0.1:0";
    l.service = service;
    l.slow_start = Duration::zero();
    c.listeners.push_back(l);
    auto gw = gateway::Gateway::Start(c, clock_).value();
    EXPECT_TRUE(testing::Eventually([&] { return Routable(*gw) == instances; }, 10s));
    return gw;
  }
  static std::size_t Routable(gateway::Gateway& gw) {
    const std::string json = gw.SnapshotJson();
    std::size_t n = 0;
    for (std::size_t at = json.find("\"routable\": true"); at != std::string::npos;
         at = json.find("\"routable\": true", at + 1)) {
      ++n;
    }
    return n;
  }

  testing::TempDir dir_;
  RealClock clock_;
  std::unique_ptr<registry::Registry> registry_;
  std::unique_ptr<registry::GrpcServer> server_;
  std::string registry_address_;
};

TEST_F(GrpcChannelTest, ADefaultChannelPinsOneServerTheDroverChannelBalancesAll) {
  std::vector<std::unique_ptr<WhoAmIServer>> servers;
  for (const char* id : {"who-1", "who-2", "who-3"}) {
    servers.push_back(std::make_unique<WhoAmIServer>(id));
    Register(id, servers.back()->address());
  }
  auto gw = L4Balancer(3);

  const auto pinned = Count(grpc::CreateChannel("127.0.0.1:" + std::to_string(gw->port("whoami")),
                                                grpc::InsecureChannelCredentials()),
                            60);
  EXPECT_EQ(pinned.size(), 1u) << Show(pinned);  // one connection, one server, every call

  DiscoveryOptions d;
  d.registry = registry_address_;
  d.service = "whoami";
  auto drover = ServiceChannel::Start(d, ChannelOptions{}, clock_);
  ASSERT_TRUE(drover.ok()) << drover.status().ToString();
  std::shared_ptr<grpc::Channel> channel;
  ASSERT_TRUE(testing::Eventually(
      [&] {
        auto got = (*drover)->Get();
        if (got.ok()) channel = *got;
        return got.ok();
      },
      10s));
  EXPECT_EQ((*drover)->target().rfind("ipv4:", 0), 0u);
  // Let round_robin connect its subchannels (it picks only among connected ones).
  ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() + 5s));
  std::this_thread::sleep_for(200ms);
  const auto balanced = Count(channel, 60);
  ASSERT_EQ(balanced.size(), 3u) << Show(balanced);
  for (const auto& [id, n] : balanced) {
    EXPECT_GE(n, 15) << id;
    EXPECT_LE(n, 25) << id;
  }
  std::cout << "60 calls: default channel through one address: " << Show(pinned)
            << "; Drover channel: " << Show(balanced) << "\n";
  gw->Shutdown();
}

// Callers on their own channels (own connections), each calling every 20 ms, recording when
// each instance first answered.
class Callers {
 public:
  explicit Callers(std::vector<std::shared_ptr<grpc::Channel>> channels) {
    for (auto& ch : channels) {
      threads_.emplace_back([this, ch](std::stop_token stop) {
        auto stub = pb::WhoAmI::NewStub(ch);
        while (!stop.stop_requested()) {
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + 2s);
          pb::WhoReply reply;
          if (stub->Who(&ctx, pb::WhoRequest{}, &reply).ok()) {
            std::lock_guard lock(mu_);
            first_.emplace(reply.instance(), std::chrono::steady_clock::now());
            ++calls_[reply.instance()];
          }
          std::this_thread::sleep_for(20ms);
        }
      });
    }
  }
  ~Callers() {
    for (auto& t : threads_) t.request_stop();
  }
  // When `id` first answered, if it did.
  std::optional<std::chrono::steady_clock::time_point> First(const std::string& id) {
    std::lock_guard lock(mu_);
    auto it = first_.find(id);
    if (it == first_.end()) return std::nullopt;
    return it->second;
  }
  std::map<std::string, int> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::chrono::steady_clock::time_point> first_;
  std::map<std::string, int> calls_;
  std::vector<std::jthread> threads_;
};

// A default channel of its own: no sharing of connections with other channels.
std::shared_ptr<grpc::Channel> OwnChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

TEST_F(GrpcChannelTest, ScaleOutReachesNewServersOnlyWithMaxConnectionAgeOrTheDroverChannel) {
  for (const bool aged : {false, true}) {
    SCOPED_TRACE(aged ? "max connection age 2 s" : "no max connection age");
    ServerOptions options;
    if (aged) {
      options.max_connection_age = 2s;
      options.max_connection_age_grace = 1s;
    }
    const std::string service = aged ? "aged" : "plain";
    const std::string prefix = service + "-";
    std::vector<std::unique_ptr<WhoAmIServer>> servers;
    for (int i = 1; i <= 3; ++i) {
      servers.push_back(std::make_unique<WhoAmIServer>(prefix + std::to_string(i), options));
      Register(prefix + std::to_string(i), servers.back()->address(), service);
    }
    auto gw = L4Balancer(3, service);
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    for (int i = 0; i < 10; ++i) {
      channels.push_back(OwnChannel("127.0.0.1:" + std::to_string(gw->port("whoami"))));
    }
    // Every connection is made (and so pinned by the L4 balancer) before the scale-out: a
    // channel that first connects after it, on a loaded machine, would land on a new server by
    // right, and say nothing about the incident.
    for (const auto& channel : channels) {
      ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() + 10s));
    }
    {
      Callers callers(channels);
      std::this_thread::sleep_for(500ms);
      for (int i = 4; i <= 5; ++i) {
        servers.push_back(std::make_unique<WhoAmIServer>(prefix + std::to_string(i), options));
        Register(prefix + std::to_string(i), servers.back()->address(), service);
      }
      const auto added = std::chrono::steady_clock::now();
      ASSERT_TRUE(testing::Eventually([&] { return Routable(*gw) == 5; }, 10s));
      if (aged) {
        // Each GOAWAY sends a caller back through the balancer, which prefers the new servers.
        EXPECT_TRUE(testing::Eventually(
            [&] { return callers.First("aged-4") && callers.First("aged-5"); }, 15s, 10ms))
            << Show(callers.calls());
        if (callers.First("aged-4") && callers.First("aged-5")) {
          std::cout << "scale-out through one address, max connection age 2 s: first call on the"
                    << " new servers after " << Seconds(*callers.First("aged-4") - added)
                    << " s and " << Seconds(*callers.First("aged-5") - added) << " s\n";
        }
      } else {
        std::this_thread::sleep_for(5s);  // more than two ages of the aged run
        EXPECT_FALSE(callers.First("plain-4").has_value()) << Show(callers.calls());
        EXPECT_FALSE(callers.First("plain-5").has_value()) << Show(callers.calls());
        std::cout << "scale-out through one address, no max connection age: 5 s later "
                  << Show(callers.calls()) << "\n";
      }
    }
    channels.clear();
    gw->Shutdown();
  }

  // The Drover channel needs no max age: the registry update alone brings them in.
  std::vector<std::unique_ptr<WhoAmIServer>> servers;
  for (int i = 1; i <= 3; ++i) {
    servers.push_back(std::make_unique<WhoAmIServer>("rr-" + std::to_string(i)));
    Register("rr-" + std::to_string(i), servers.back()->address(), "rr");
  }
  DiscoveryOptions d;
  d.registry = registry_address_;
  d.service = "rr";
  ChannelOptions co;
  auto drover = ServiceChannel::Start(d, co, clock_).value();
  ASSERT_TRUE(
      testing::Eventually([&] { return drover->target().find(",") != std::string::npos; }, 10s));
  // One caller, always on the current channel.
  std::atomic<bool> run{true};
  std::mutex mu;
  std::map<std::string, std::chrono::steady_clock::time_point> first;
  std::jthread caller([&] {
    while (run) {
      auto ch = drover->Get();
      if (ch.ok()) {
        auto stub = pb::WhoAmI::NewStub(*ch);
        grpc::ClientContext ctx;
        SetDeadline(ctx, co);
        pb::WhoReply reply;
        if (stub->Who(&ctx, pb::WhoRequest{}, &reply).ok()) {
          std::lock_guard lock(mu);
          first.emplace(reply.instance(), std::chrono::steady_clock::now());
        }
      }
      std::this_thread::sleep_for(10ms);
    }
  });
  std::this_thread::sleep_for(300ms);
  for (int i = 4; i <= 5; ++i) {
    servers.push_back(std::make_unique<WhoAmIServer>("rr-" + std::to_string(i)));
    Register("rr-" + std::to_string(i), servers.back()->address(), "rr");
  }
  const auto added = std::chrono::steady_clock::now();
  const bool reached = testing::Eventually(
      [&] {
        std::lock_guard lock(mu);
        return first.count("rr-4") > 0 && first.count("rr-5") > 0;
      },
      10s, 5ms);
  run = false;
  caller.join();
  ASSERT_TRUE(reached);
  std::cout << "scale-out with the Drover channel (no max age): first call on the new servers "
            << "after " << Seconds(first["rr-4"] - added) << " s and "
            << Seconds(first["rr-5"] - added) << " s\n";
}

}  // namespace
}  // namespace drover::grpc_defaults
