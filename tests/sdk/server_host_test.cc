// ServerHost against a real registry (in-process, served over gRPC on loopback), real sockets
// and a DiscoveryClient watching like a gateway would: the seed-000 life cycle end to end.
#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <latch>
#include <thread>

#include "drover/discovery.h"
#include "drover/host.h"
#include "registry/grpc_api.h"
#include "registry/registry.h"
#include "registry/sqlite_store.h"
#include "testing/eventually.h"
#include "testing/free_port.h"
#include "testing/http_client.h"
#include "testing/line_client.h"
#include "testing/temp_dir.h"
#include "zone_protocol.h"

namespace drover {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;
using testing::LineClient;

class ServerHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = registry::SqliteStore::Open(dir_.path());
    ASSERT_TRUE(store.ok());
    registry_ = registry::Registry::Open(std::move(*store), registry_clock_).value();
    registry::GrpcOptions options;
    options.address = "127.0.0.1:0";
    server_ = registry::GrpcServer::Start(*registry_, options).value();
    DiscoveryOptions d;
    d.registry = Registry();
    d.service = "zone";
    d.list_interval = 200ms;
    d.reconnect_backoff = 50ms;
    discovery_ = DiscoveryClient::Start(d, clock_).value();
  }
  void TearDown() override {
    host_.reset();
    discovery_->Stop();
    server_->Stop();
  }

  std::string Registry() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  HostOptions Options(std::string id = "z1") {
    HostOptions o;
    o.registry = Registry();
    o.service = "zone";
    o.instance_id = id;
    o.listen = "127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
    o.ttl = 10s;
    o.heartbeat_interval = 100ms;
    o.propagation_delay = 0s;
    o.drain_deadline = 1s;
    o.grace_period = 5s;
    o.on_session = [id](Session& s) { examples::ServeZoneSession(s, id); };
    return o;
  }

  // What the gateway would see: the endpoint `id` in the discovery snapshot, if any.
  std::optional<router::Endpoint> Seen(const std::string& id) const {
    auto snapshot = discovery_->Snapshot();
    if (!snapshot.ok()) return std::nullopt;
    const auto& table = *snapshot->table;
    for (std::size_t i = 0; i < table.size(); ++i) {
      if (table.at(i).id == id) return table.at(i);
    }
    return std::nullopt;
  }

  testing::TempDir dir_;
  FakeClock registry_clock_;
  RealClock clock_;
  std::unique_ptr<registry::Registry> registry_;
  std::unique_ptr<registry::GrpcServer> server_;
  std::unique_ptr<DiscoveryClient> discovery_;
  std::unique_ptr<ServerHost> host_;
};

std::uint16_t PortOf(const std::string& address) {
  return static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

TEST_F(ServerHostTest, InvisibleAndUnreachableUntilWarmAndReady) {
  std::latch in_warmup(1), finish_warmup(1);
  HostOptions o = Options();
  const std::uint16_t port = PortOf(o.listen);
  o.warmup.push_back({"map data", [&](std::stop_token) {
                        in_warmup.count_down();
                        finish_warmup.wait();
                        return Status::Ok();
                      }});
  host_ = ServerHost::Create(o).value();
  std::thread start([&] { EXPECT_TRUE(host_->Start().ok()); });
  in_warmup.wait();

  // Warming up: alive, not ready, not listening, not in the registry.
  EXPECT_EQ(testing::Http(host_->health_port(), "GET", "/live").status, 200);
  const auto ready = testing::Http(host_->health_port(), "GET", "/ready");
  EXPECT_EQ(ready.status, 503);
  EXPECT_EQ(ready.body, "not ready: warming up: map data\n");
  EXPECT_FALSE(LineClient(port).connected());
  EXPECT_TRUE(registry_->List("zone").value().instances.empty());
  ASSERT_TRUE(Eventually([&] { return discovery_->Snapshot().ok(); }));
  EXPECT_FALSE(Seen("z1"));

  finish_warmup.count_down();
  start.join();
  EXPECT_EQ(testing::Http(host_->health_port(), "GET", "/ready").status, 200);
  ASSERT_TRUE(Eventually([&] { return Seen("z1").has_value(); }));
  const router::Endpoint e = *Seen("z1");
  EXPECT_EQ(e.state, router::EndpointState::kReady);
  EXPECT_TRUE(e.accepting);
  EXPECT_EQ(e.address, o.listen);
  EXPECT_EQ(e.generation, host_->generation());
  EXPECT_EQ(e.health, "127.0.0.1:" + std::to_string(host_->health_port()));  // for gateways
  EXPECT_EQ(LineClient(port).Ask("HELLO ann"), "WELCOME z1");
  ASSERT_TRUE(Eventually([&] { return host_->stats().heartbeats >= 2; }));
}

// What Prometheus finds through the registry (GET /v1/prometheus/sd): the drover.metrics label,
// the probe port, which answers /metrics with the host's own figures.
TEST_F(ServerHostTest, ServesMetricsOnTheProbePortAndRegistersItsAddress) {
  HostOptions o = Options();
  const std::uint16_t port = PortOf(o.listen);
  host_ = ServerHost::Create(o).value();
  ASSERT_TRUE(host_->Start().ok());
  const std::string probe = "127.0.0.1:" + std::to_string(host_->health_port());
  const auto list = registry_->List("zone").value();
  ASSERT_EQ(list.instances.size(), 1u);
  EXPECT_EQ(list.instances[0].spec.labels.at(std::string(kMetricsLabel)), probe);
  EXPECT_EQ(list.instances[0].spec.labels.at(std::string(kHealthLabel)), probe);

  LineClient session(port);
  ASSERT_EQ(session.Ask("HELLO ann"), "WELCOME z1");
  auto has = [&](const std::string& line) {
    const auto reply = testing::Http(host_->health_port(), "GET", "/metrics");
    return reply.status == 200 && reply.body.find(line + "\n") != std::string::npos;
  };
  EXPECT_TRUE(has(R"(drover_host_state{state="ready"} 1)"));
  EXPECT_TRUE(has("drover_host_generation " + std::to_string(host_->generation())));
  EXPECT_TRUE(has("drover_host_accepting 1"));
  EXPECT_TRUE(has("drover_host_sessions 1"));
  EXPECT_TRUE(has("drover_host_sessions_total 1"));
  ASSERT_TRUE(Eventually([&] { return host_->stats().heartbeats >= 2; }));
  EXPECT_TRUE(Eventually([&] {
    return has("drover_host_heartbeats_total " + std::to_string(host_->stats().heartbeats));
  }));
}

TEST_F(ServerHostTest, LeavesDiscoveryBeforeClosingAndDrainsSessionsToTheDeadline) {
  HostOptions o = Options();
  o.propagation_delay = 2s;  // room for the test to connect between the two events
  o.drain_deadline = 1s;
  const std::uint16_t port = PortOf(o.listen);
  host_ = ServerHost::Create(o).value();
  ASSERT_TRUE(host_->Start().ok());
  ASSERT_TRUE(Eventually([&] { return Seen("z1").has_value(); }));
  LineClient old_session(port);
  ASSERT_EQ(old_session.Ask("HELLO old"), "WELCOME z1");

  std::thread shutdown([&] { host_->Shutdown(); });
  // 1. The watcher sees the instance go (DRAINING, then deregistered) ...
  ASSERT_TRUE(Eventually([&] { return !Seen("z1").has_value(); }));
  // 2. ... while the listener still takes and serves a client that picked it a moment ago.
  {
    LineClient late(port);
    ASSERT_TRUE(late.connected()) << "the listener closed before the instance left discovery";
    EXPECT_EQ(late.Ask("HELLO late"), "WELCOME z1");
    EXPECT_EQ(late.Ask("QUIT"), "BYE");
  }
  // 3. Then the port closes; the old session is still served ...
  ASSERT_TRUE(Eventually([&] { return !LineClient(port).connected(); }, 10s, 20ms));
  EXPECT_EQ(old_session.Ask("PING"), "PONG");
  // 4. ... until the drain deadline cuts it.
  EXPECT_EQ(old_session.ReadLine(), std::nullopt);
  shutdown.join();

  const std::vector<ShutdownStep> steps = host_->shutdown_steps();
  ASSERT_EQ(steps.size(), 5u);
  const char* names[] = {"deregister", "propagation", "stop-accepting", "drain", "stop-timers"};
  for (std::size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].name, names[i]);
    std::cout << "shutdown step " << steps[i].name << ": "
              << std::chrono::duration<double, std::milli>(steps[i].took).count() << " ms "
              << steps[i].detail << "\n";
  }
  EXPECT_NE(steps[3].detail.find("1 cut"), std::string::npos) << steps[3].detail;
  EXPECT_GE(steps[1].took, 2s);  // the propagation delay is waited in full
  EXPECT_EQ(testing::Http(host_->health_port(), "GET", "/live").status, 0);  // probes stopped
  const auto list = registry_->List("zone").value();
  EXPECT_TRUE(list.instances.empty());
}

TEST_F(ServerHostTest, ConcurrentShutdownsThenDestroyDeregisterExactlyOnce) {
  host_ = ServerHost::Create(Options()).value();
  ASSERT_TRUE(host_->Start().ok());
  const std::uint64_t generation = host_->generation();
  auto watcher = registry_->Watch(registry_->revision(), "zone").value();
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) threads.emplace_back([&] { host_->Shutdown(); });
  for (auto& t : threads) t.join();
  host_.reset();

  int deletes = 0, drains = 0;
  for (int i = 0; i < 5; ++i) {  // a few rounds: events queued by now, plus any stragglers
    const std::vector<registry::Event> events = watcher->Next(50ms).value();
    for (const registry::Event& e : events) {
      if (e.type == registry::EventType::kDelete) {
        ++deletes;
        EXPECT_EQ(e.reason, registry::RemovalReason::kDrain);  // deregistered while DRAINING
        EXPECT_EQ(e.instance.spec.generation, generation);
      } else if (e.type == registry::EventType::kPut &&
                 e.instance.spec.state == registry::InstanceState::kDraining) {
        ++drains;
      }
    }
  }
  EXPECT_EQ(deletes, 1);
  EXPECT_EQ(drains, 1);
}

TEST_F(ServerHostTest, AnIdleHostShutsDownWithoutWaitingForItsHeartbeatTimer) {
  HostOptions o = Options();
  o.ttl = 90s;
  o.heartbeat_interval = 30s;  // the timer is asleep for 30 s when Shutdown() comes
  o.propagation_delay = 0s;
  o.drain_deadline = 0s;
  host_ = ServerHost::Create(o).value();
  ASSERT_TRUE(host_->Start().ok());
  const auto t0 = std::chrono::steady_clock::now();
  host_->Shutdown();
  const auto took = std::chrono::steady_clock::now() - t0;
  std::cout << "idle shutdown took " << std::chrono::duration<double, std::milli>(took).count()
            << " ms\n";
  // Not a speed assertion: a timer that slept through the stop would take the full 30 s.
  EXPECT_LT(took, 15s);
}

TEST_F(ServerHostTest, ALeaseTheRegistryExpiredComesBackAsANewGeneration) {
  HostOptions o = Options();
  o.ttl = 2s;
  o.heartbeat_interval = 50ms;
  host_ = ServerHost::Create(o).value();
  ASSERT_TRUE(host_->Start().ok());
  const std::uint64_t first = host_->generation();
  // The registry's clock jumps past the lease: as if this host had been cut off for a ttl.
  // (Repeated: a heartbeat landing between Advance and Tick renews the lease in the new time.)
  ASSERT_TRUE(Eventually(
      [&] {
        if (host_->stats().reregistrations > 0) return true;
        registry_clock_.Advance(5s);
        EXPECT_TRUE(registry_->Tick().ok());
        return false;
      },
      10s, 100ms));
  EXPECT_GT(host_->generation(), first);
  ASSERT_TRUE(Eventually([&] {
    const auto e = Seen("z1");
    return e && e->generation == host_->generation();
  }));
}

TEST_F(ServerHostTest, HeartbeatsFailWhileTheRegistryIsDownAndTheHostKeepsServing) {
  host_ = ServerHost::Create(Options()).value();
  ASSERT_TRUE(host_->Start().ok());
  ASSERT_TRUE(Eventually([&] { return Seen("z1").has_value(); }));
  server_->Stop();
  ASSERT_TRUE(Eventually([&] { return host_->stats().heartbeat_failures >= 2; }));
  EXPECT_EQ(testing::Http(host_->health_port(), "GET", "/ready").status, 200);
  EXPECT_EQ(LineClient(PortOf(host_->address())).Ask("PING"), "PONG");
  // The discovery client keeps its last snapshot and says how old it is.
  EXPECT_TRUE(Seen("z1").has_value());
}

TEST_F(ServerHostTest, StartFailsClearlyWhenTheRegistryRefuses) {
  HostOptions o = Options();
  o.service = "Not A Valid Service!";
  host_ = ServerHost::Create(o).value();
  const Status s = host_->Start();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("register"), std::string::npos);
  EXPECT_EQ(testing::Http(host_->health_port(), "GET", "/ready").status, 503);
}

}  // namespace
}  // namespace drover
