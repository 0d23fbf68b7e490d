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

  void Register(const std::string& id, const std::string& address) {
    registry::InstanceSpec spec;
    spec.address = address;
    spec.generation = 1;
    spec.state = registry::InstanceState::kReady;
    spec.ttl_ms = 60'000;
    ASSERT_TRUE(registry_->Register("whoami", id, spec).ok());
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
  // The L4 balancer in front of them: a TCP listener of the gateway, per-connection P2C.
  gateway::GatewayConfig c;
  c.registry = registry_address_;
  c.threads = 1;
  c.admin = "";
  gateway::ListenerConfig l;
  l.name = "whoami";
  l.address = "127.0.0.1:0";
  l.service = "whoami";
  c.listeners.push_back(l);
  auto gw = gateway::Gateway::Start(c, clock_).value();
  ASSERT_TRUE(testing::Eventually(
      [&] { return gw->SnapshotJson().find("\"who-3\"") != std::string::npos; }, 10s));

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

}  // namespace
}  // namespace drover::grpc_defaults
