// DiscoveryClient against a real registry over real sockets (in-process registry and gRPC
// server on a loopback port): it follows changes, keeps the last snapshot while the registry is
// down, resumes from its revision, and readers only ever see complete snapshots.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "drover/discovery.h"
#include "registry/grpc_api.h"
#include "registry/registry.h"
#include "registry/sqlite_store.h"
#include "testing/temp_dir.h"

namespace drover {
namespace {

using namespace std::chrono_literals;

registry::InstanceSpec Spec(std::uint64_t generation) {
  registry::InstanceSpec spec;
  spec.address = "127.0.0.1:9001";
  spec.generation = generation;
  spec.state = registry::InstanceState::kReady;
  spec.ttl_ms = 600'000;
  return spec;
}

class DiscoveryClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = registry::SqliteStore::Open(dir_.path());
    ASSERT_TRUE(store.ok());
    registry_ = registry::Registry::Open(std::move(*store), registry_clock_).value();
    StartServer("127.0.0.1:0");
  }
  void TearDown() override {
    if (client_) client_->Stop();
    if (server_) server_->Stop();
  }
  void StartServer(const std::string& address) {
    registry::GrpcOptions options;
    options.address = address;
    auto server = registry::GrpcServer::Start(*registry_, options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    port_ = server_->port();
  }
  void StartClient() {
    DiscoveryOptions options;
    options.registry = "127.0.0.1:" + std::to_string(port_);
    options.service = "zone";
    options.list_interval = 200ms;
    options.reconnect_backoff = 50ms;
    client_ = DiscoveryClient::Start(options, clock_).value();
  }

  testing::TempDir dir_;
  FakeClock registry_clock_;
  RealClock clock_;
  std::unique_ptr<registry::Registry> registry_;
  std::unique_ptr<registry::GrpcServer> server_;
  int port_ = 0;
  std::unique_ptr<DiscoveryClient> client_;
};

TEST_F(DiscoveryClientTest, FollowsTheRegistryAndNeverAnswersEmptyBeforeItKnows) {
  ASSERT_TRUE(registry_->Register("zone", "z1", Spec(1)).ok());
  ASSERT_TRUE(registry_->Register("chat", "c1", Spec(1)).ok());  // another service: not ours
  StartClient();
  ASSERT_TRUE(client_->WaitForRevision(2, 10s));
  ASSERT_TRUE(registry_->Register("zone", "z2", Spec(1)).ok());
  ASSERT_TRUE(
      registry_->SetState("zone", "z1", 1, registry::InstanceState::kDraining, std::nullopt).ok());
  ASSERT_TRUE(client_->WaitForRevision(4, 10s));
  auto snapshot = client_->Snapshot();
  ASSERT_TRUE(snapshot.ok());
  const auto& table = *snapshot->table;
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table.at(0).id, "z1");
  EXPECT_EQ(table.at(0).state, router::EndpointState::kDraining);
  EXPECT_EQ(table.at(1).id, "z2");
  EXPECT_TRUE(table.at(1).Routable());
}

TEST_F(DiscoveryClientTest, ServesTheLastSnapshotWhileTheRegistryIsDownAndResumes) {
  ASSERT_TRUE(registry_->Register("zone", "z1", Spec(1)).ok());
  ASSERT_TRUE(registry_->Register("zone", "z2", Spec(1)).ok());
  StartClient();
  ASSERT_TRUE(client_->WaitForRevision(2, 10s));
  server_->Stop();
  server_.reset();
  // Changes the client cannot see yet.
  ASSERT_TRUE(registry_->Deregister("zone", "z1", 1).ok());
  ASSERT_TRUE(registry_->Register("zone", "z3", Spec(1)).ok());
  std::this_thread::sleep_for(300ms);
  auto stale = client_->Snapshot();
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(stale->table->size(), 2u);  // the last good view, not an empty one
  EXPECT_EQ(stale->table->version(), 2u);
  EXPECT_FALSE(stale->connected);
  EXPECT_GE(client_->Age(), 300ms);
  // The registry comes back on the same port; the client catches up from its revision.
  StartServer("127.0.0.1:" + std::to_string(port_));
  ASSERT_TRUE(client_->WaitForRevision(4, 10s));
  auto fresh = client_->Snapshot();
  ASSERT_TRUE(fresh.ok());
  ASSERT_EQ(fresh->table->size(), 2u);
  EXPECT_EQ(fresh->table->at(0).id, "z2");
  EXPECT_EQ(fresh->table->at(1).id, "z3");
  EXPECT_LT(client_->Age(), 5s);
}

TEST_F(DiscoveryClientTest, NoRegistryMeansUnavailableNotEmpty) {
  port_ = 1;  // nothing listens there
  server_->Stop();
  StartClient();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(client_->Snapshot().status().code(), StatusCode::kUnavailable);
}

TEST_F(DiscoveryClientTest, ReadersOnEightThreadsSeeOnlyCompleteSnapshots) {
  StartClient();
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::atomic<std::uint64_t> reads{0};
  std::vector<std::jthread> readers;
  for (int r = 0; r < 8; ++r) {
    readers.emplace_back([&] {
      while (!done.load()) {
        auto snapshot = client_->Snapshot();
        if (!snapshot.ok()) continue;
        // Only registrations happen, one per revision: revision N holds exactly N instances.
        const auto& table = *snapshot->table;
        if (table.size() != table.version()) bad.fetch_add(1);
        reads.fetch_add(1);
      }
    });
  }
  constexpr int kInstances = 300;
  for (int i = 1; i <= kInstances; ++i) {
    ASSERT_TRUE(registry_->Register("zone", "z" + std::to_string(i), Spec(1)).ok());
  }
  EXPECT_TRUE(client_->WaitForRevision(kInstances, 20s));
  done = true;
  readers.clear();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(reads.load(), 0u);
  EXPECT_EQ(client_->Snapshot()->table->size(), static_cast<std::size_t>(kInstances));
}

// A service whose List is larger than gRPC's default 4 MiB message limit (520 instances with 32
// labels of the largest size each, about 5.5 MB): the client still gets its view.
TEST_F(DiscoveryClientTest, AServiceLargerThanGrpcsDefaultMessageLimitIsStillSeen) {
  constexpr int kInstances = 520;
  registry::InstanceSpec spec = Spec(1);
  for (int l = 0; l < 32; ++l) {
    std::string key = "label-" + std::to_string(l);
    key.resize(63, 'k');
    spec.labels[key] = std::string(256, 'v');
  }
  for (int i = 0; i < kInstances; ++i) {
    ASSERT_TRUE(registry_->Register("zone", "z" + std::to_string(i), spec).ok());
  }
  StartClient();
  ASSERT_TRUE(client_->WaitForRevision(kInstances, 20s));
  auto snapshot = client_->Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  EXPECT_EQ(snapshot->table->size(), static_cast<std::size_t>(kInstances));
}

}  // namespace
}  // namespace drover
