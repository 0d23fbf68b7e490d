// HostCore's life-cycle logic against a scripted registry (FakeWriter): start order, heartbeats
// that fail or throw, a lost lease, readiness flips, and a shutdown that runs once however many
// threads ask. Real-registry versions of these live in server_host_test.cc; this file also runs
// under ThreadSanitizer.
#include "sdk/host_core.h"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <map>
#include <stdexcept>
#include <thread>

#include "common/fencing.h"
#include "drover/discovery.h"
#include "sdk/socket_util.h"
#include "testing/eventually.h"
#include "testing/free_port.h"
#include "testing/http_client.h"
#include "testing/line_client.h"

namespace drover::sdk {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;

// Records every call; Heartbeat's answer is scripted.
class FakeWriter final : public RegistryWriter {
 public:
  Status Register(const Registration& r, Duration) override {
    std::lock_guard lock(mu_);
    calls_.push_back("register " + std::to_string(r.key.generation) +
                     (r.accepting ? " accepting" : " not-accepting"));
    last_address_ = r.address;
    last_labels_ = r.labels;
    if (r.key.generation <= fenced_up_to_) {
      return FencedError(r.key.service, r.key.id, r.key.generation, fenced_up_to_, "removed");
    }
    return register_status_;
  }
  Status Heartbeat(const InstanceKey& key, Duration) override {
    std::lock_guard lock(mu_);
    if (heartbeat_throws_) throw std::runtime_error("boom");
    calls_.push_back("heartbeat " + std::to_string(key.generation));
    return heartbeat_status_;
  }
  Status SetState(const InstanceKey& key, std::optional<InstancePhase> phase,
                  std::optional<bool> accepting, Duration) override {
    std::lock_guard lock(mu_);
    std::string call = "set " + std::to_string(key.generation);
    if (phase) call += phase == InstancePhase::kDraining ? " draining" : " other";
    if (accepting) call += *accepting ? " accepting" : " not-accepting";
    calls_.push_back(call);
    return Status::Ok();
  }
  Status Deregister(const InstanceKey& key, Duration) override {
    std::lock_guard lock(mu_);
    calls_.push_back("deregister " + std::to_string(key.generation));
    return Status::Ok();
  }
  Result<std::uint64_t> CurrentGeneration(const std::string&, const std::string&,
                                          Duration) override {
    std::lock_guard lock(mu_);
    calls_.push_back("lookup");
    return current_generation_;
  }
  void Cancel() override {
    std::lock_guard lock(mu_);
    calls_.push_back("cancel");
  }

  std::vector<std::string> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  std::size_t Count(const std::string& prefix) const {
    std::lock_guard lock(mu_);
    std::size_t n = 0;
    for (const auto& c : calls_) n += c.rfind(prefix, 0) == 0 ? 1 : 0;
    return n;
  }
  void SetHeartbeat(Status s, bool throws = false) {
    std::lock_guard lock(mu_);
    heartbeat_status_ = std::move(s);
    heartbeat_throws_ = throws;
  }
  void SetCurrentGeneration(std::uint64_t g) {
    std::lock_guard lock(mu_);
    current_generation_ = g;
  }
  // Registrations at or below `g` are refused as fenced, as after a tombstone at `g`.
  void SetFencedUpTo(std::uint64_t g) {
    std::lock_guard lock(mu_);
    fenced_up_to_ = g;
  }
  void SetRegister(Status s) {
    std::lock_guard lock(mu_);
    register_status_ = std::move(s);
  }
  std::string last_address() const {
    std::lock_guard lock(mu_);
    return last_address_;
  }
  std::map<std::string, std::string> last_labels() const {
    std::lock_guard lock(mu_);
    return last_labels_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> calls_;
  Status heartbeat_status_;
  Status register_status_;
  bool heartbeat_throws_ = false;
  std::uint64_t current_generation_ = 0;
  std::uint64_t fenced_up_to_ = 0;
  std::string last_address_;
  std::map<std::string, std::string> last_labels_;
};

HostOptions Options() {
  HostOptions o;
  o.registry = "127.0.0.1:1";  // unused: the writer is a fake
  o.service = "zone";
  o.instance_id = "z1";
  o.generation = 7;
  o.ttl = 30s;
  o.heartbeat_interval = 1s;
  o.propagation_delay = 0s;
  o.drain_deadline = 1s;
  o.grace_period = 5s;
  o.on_session = [](Session& s) {
    char buf[64];
    while (::recv(s.fd(), buf, sizeof buf, 0) > 0) {
      ::send(s.fd(), "ok\n", 3, MSG_NOSIGNAL);
    }
  };
  return o;
}

class HostCoreTest : public ::testing::Test {
 protected:
  // Fake time drives the heartbeats; the host itself sleeps on nothing with these options.
  void Make(HostOptions o) {
    ASSERT_TRUE(NormalizeHostOptions(o).ok());
    host_ = std::make_unique<HostCore>(std::move(o), writer_, beats_, clock_);
    ASSERT_TRUE(host_->Init().ok());
  }
  // Lets one heartbeat interval pass on the fake clock and waits until `done`.
  template <typename Pred>
  void Beat(Pred done) {
    ASSERT_TRUE(clock_.AwaitSleepers(1, 10s));
    clock_.Advance(1s);
    ASSERT_TRUE(Eventually(done));
  }

  FakeClock clock_;
  FakeWriter writer_;
  Heartbeats beats_{clock_};
  std::unique_ptr<HostCore> host_;
};

TEST_F(HostCoreTest, WarmsUpThenListensThenRegistersNeverBefore) {
  std::latch in_warmup(1), finish_warmup(1);
  HostOptions o = Options();
  // A fixed port, so the test can try it during warm-up.
  const std::uint16_t port = testing::FreeLoopbackPort();
  o.listen = "127.0.0.1:" + std::to_string(port);
  o.warmup.push_back({"maps", [&](std::stop_token) {
                        in_warmup.count_down();
                        finish_warmup.wait();
                        return Status::Ok();
                      }});
  Make(std::move(o));
  std::thread start([&] { EXPECT_TRUE(host_->Start().ok()); });
  in_warmup.wait();
  EXPECT_EQ(host_->CheckReadiness().reason, "warming up: maps");
  EXPECT_TRUE(writer_.calls().empty());
  EXPECT_FALSE(testing::LineClient(port).connected());  // nothing listens yet
  const auto live = testing::Http(host_->health_port(), "GET", "/live");
  EXPECT_EQ(live.status, 200);
  EXPECT_EQ(testing::Http(host_->health_port(), "GET", "/ready").status, 503);
  finish_warmup.count_down();
  start.join();
  EXPECT_EQ(writer_.calls(), std::vector<std::string>{"register 7 accepting"});
  EXPECT_EQ(writer_.last_address(), "127.0.0.1:" + std::to_string(port));
  EXPECT_TRUE(host_->CheckReadiness().ready);
  EXPECT_EQ(testing::Http(host_->health_port(), "GET", "/ready").status, 200);
  EXPECT_EQ(testing::LineClient(port).Ask("hi"), "ok");
  EXPECT_EQ(host_->generation(), 7u);
}

// A loopback address reaches only this machine: registered with a registry elsewhere, every
// other machine would dial itself. Refused then, unless allowed; fine with a registry on
// loopback too (fleet tests put hosts on 127.0.0.2, 127.0.0.3, ...).
TEST_F(HostCoreTest, ALoopbackAddressIsRegisteredOnlyWithARegistryOnLoopback) {
  HostOptions remote = Options();
  remote.registry = "10.1.2.3:7071";
  Make(remote);
  const Status refused = host_->Start();
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("is loopback, but the registry at 10.1.2.3:7071 is not"),
            std::string::npos)
      << refused.message();
  EXPECT_TRUE(writer_.calls().empty());
  host_->Shutdown();

  HostOptions allowed = remote;
  allowed.allow_loopback_address = true;
  Make(allowed);
  EXPECT_TRUE(host_->Start().ok());
  host_->Shutdown();

  HostOptions fleet = Options();
  fleet.registry = "grpc://127.0.0.5:7071";
  fleet.listen = "127.0.0.3:0";
  Make(fleet);
  ASSERT_TRUE(host_->Start().ok());
  EXPECT_EQ(writer_.last_address().rfind("127.0.0.3:", 0), 0u) << writer_.last_address();
  host_->Shutdown();
}

// The health probe follows the same rule: a routable instance with a loopback probe would have
// remote gateways check themselves.
TEST_F(HostCoreTest, ALoopbackHealthAddressIsRefusedWithARemoteRegistry) {
  HostOptions o = Options();
  o.registry = "10.1.2.3:7071";
  o.advertise = "10.9.9.9:9000";
  o.health = "127.0.0.1:0";
  Make(o);
  const Status refused = host_->Start();
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("the health address 127.0.0.1:"), std::string::npos)
      << refused.message();
  host_->Shutdown();
}

// Listening on every interface, the host advertises this machine's routable address (or says
// it has none).
TEST_F(HostCoreTest, ListeningOnEveryInterfaceAdvertisesARoutableAddress) {
  HostOptions o = Options();
  o.listen = "0.0.0.0:0";
  o.health = "";
  Make(o);
  const Status started = host_->Start();
  const std::string routable = FirstRoutableIpv4();
  if (routable.empty()) {
    EXPECT_EQ(started.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(started.message().find("no non-loopback IPv4 address"), std::string::npos);
  } else {
    ASSERT_TRUE(started.ok()) << started.ToString();
    EXPECT_EQ(writer_.last_address().rfind(routable + ":", 0), 0u) << writer_.last_address();
  }
  host_->Shutdown();
}

TEST_F(HostCoreTest, AFailedWarmupNeverRegisters) {
  HostOptions o = Options();
  o.warmup.push_back({"db pool", [](std::stop_token) { return UnavailableError("db down"); }});
  Make(std::move(o));
  const Status s = host_->Start();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("warm-up 'db pool'"), std::string::npos) << s.message();
  EXPECT_TRUE(writer_.calls().empty());
  EXPECT_FALSE(host_->CheckReadiness().ready);
  host_->Shutdown();
  EXPECT_EQ(writer_.Count("deregister"), 0u);
  EXPECT_EQ(host_->shutdown_steps().front().detail, "was not registered");
}

TEST_F(HostCoreTest, ShutdownDuringWarmupCancelsStartAndRegistersNothing) {
  std::latch in_warmup(1);
  HostOptions o = Options();
  o.warmup.push_back({"maps", [&](std::stop_token stop) {
                        in_warmup.count_down();
                        std::mutex m;
                        std::condition_variable_any cv;
                        std::unique_lock lock(m);
                        cv.wait(lock, stop, [] { return false; });  // until stop
                        return Status::Ok();
                      }});
  Make(std::move(o));
  Status started;
  std::thread start([&] { started = host_->Start(); });
  in_warmup.wait();
  host_->Shutdown();
  start.join();
  EXPECT_EQ(started.code(), StatusCode::kCancelled);
  EXPECT_EQ(writer_.Count("register"), 0u);
  EXPECT_EQ(writer_.Count("deregister"), 0u);
}

TEST_F(HostCoreTest, ConcurrentShutdownsDeregisterOnceInOrder) {
  Make(Options());
  ASSERT_TRUE(host_->Start().ok());
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&] { host_->Shutdown(); });
  for (auto& t : threads) t.join();
  host_.reset();  // the destructor shuts down again: still nothing more
  EXPECT_EQ(writer_.calls(),
            (std::vector<std::string>{"register 7 accepting", "set 7 draining not-accepting",
                                      "deregister 7", "cancel"}));
}

TEST_F(HostCoreTest, HeartbeatsRenewAndAreSkippedWhileDraining) {
  Make(Options());
  ASSERT_TRUE(host_->Start().ok());
  Beat([&] { return host_->stats().heartbeats == 1; });
  Beat([&] { return host_->stats().heartbeats == 2; });
  EXPECT_EQ(writer_.Count("heartbeat 7"), 2u);
}

TEST_F(HostCoreTest, AThrowingOrFailingHeartbeatIsCountedAndTheHostKeepsRunning) {
  Make(Options());
  ASSERT_TRUE(host_->Start().ok());
  writer_.SetHeartbeat(Status::Ok(), /*throws=*/true);
  Beat([&] { return host_->stats().heartbeat_failures == 1; });
  writer_.SetHeartbeat(UnavailableError("registry down"));
  Beat([&] { return host_->stats().heartbeat_failures == 2; });
  writer_.SetHeartbeat(Status::Ok());
  Beat([&] { return host_->stats().heartbeats == 1; });
  EXPECT_TRUE(host_->CheckReadiness().ready);
  EXPECT_EQ(beats_.failures(), 0u);  // the host caught it, not the last line of defence
}

TEST_F(HostCoreTest, AnUnreachableRegistryIsRetriedWithinASecondNotAnInterval) {
  HostOptions o = Options();
  o.heartbeat_interval = 10s;
  o.ttl = 30s;
  Make(std::move(o));
  ASSERT_TRUE(host_->Start().ok());
  writer_.SetHeartbeat(UnavailableError("connection refused"));
  ASSERT_TRUE(clock_.AwaitSleepers(1, 10s));
  clock_.Advance(10s);
  ASSERT_TRUE(Eventually([&] { return host_->stats().heartbeat_failures == 1; }));
  // Retries come on a jittered backoff from 200 ms doubling up to 1 s: in 10 s of outage, at
  // least 9 more (never fewer than one a second), where the interval would have allowed one.
  for (int ms = 0; ms < 10'000; ms += 50) {
    ASSERT_TRUE(clock_.AwaitSleepers(1, 10s));
    clock_.Advance(50ms);
  }
  ASSERT_TRUE(clock_.AwaitSleepers(1, 10s));
  const std::uint64_t failures = host_->stats().heartbeat_failures;
  EXPECT_GE(failures, 10u);
  EXPECT_LE(failures, 1u + 10'000 / 100);  // never faster than half the first step
  // The registry is back: the next retry, within a second, renews; then the interval again.
  writer_.SetHeartbeat(Status::Ok());
  for (int ms = 0; ms < 1'000 && host_->stats().heartbeats == 0; ms += 50) {
    ASSERT_TRUE(clock_.AwaitSleepers(1, 10s));
    clock_.Advance(50ms);
    ASSERT_TRUE(clock_.AwaitSleepers(1, 10s));
  }
  EXPECT_EQ(host_->stats().heartbeats, 1u);
  clock_.Advance(9s);
  ASSERT_TRUE(clock_.AwaitSleepers(1, 10s));
  EXPECT_EQ(host_->stats().heartbeats, 1u) << "renewed: back on the 10 s interval";
  clock_.Advance(1s);
  ASSERT_TRUE(Eventually([&] { return host_->stats().heartbeats == 2; }));
}

TEST_F(HostCoreTest, ARefusedHeartbeatIsNotRetriedSooner) {
  Make(Options());
  ASSERT_TRUE(host_->Start().ok());
  writer_.SetHeartbeat(PermissionDeniedError("token revoked"));
  Beat([&] { return host_->stats().heartbeat_failures == 1; });
  // Not a failure another try soon could fix: the next beat is an interval (1 s) later.
  ASSERT_TRUE(clock_.AwaitSleepers(1, 10s));
  clock_.Advance(900ms);
  ASSERT_TRUE(clock_.AwaitSleepers(1, 10s));
  EXPECT_EQ(host_->stats().heartbeat_failures, 1u);
  clock_.Advance(100ms);
  ASSERT_TRUE(Eventually([&] { return host_->stats().heartbeat_failures == 2; }));
}

TEST_F(HostCoreTest, ALostLeaseRegistersAgainWithAHigherGeneration) {
  Make(Options());
  ASSERT_TRUE(host_->Start().ok());
  writer_.SetHeartbeat(NotFoundError("zone/z1 not registered"));
  Beat([&] { return host_->stats().reregistrations == 1; });
  const std::uint64_t again = host_->generation();
  EXPECT_GT(again, 7u);
  writer_.SetHeartbeat(Status::Ok());
  Beat([&] { return host_->stats().heartbeats == 1; });
  EXPECT_EQ(writer_.Count("heartbeat " + std::to_string(again)), 1u);
  host_->Shutdown();
  EXPECT_EQ(writer_.Count("deregister " + std::to_string(again)), 1u);
}

TEST_F(HostCoreTest, AnotherProcessWithTheSameIdIsNeverFencedOutByUs) {
  Make(Options());
  ASSERT_TRUE(host_->Start().ok());
  writer_.SetHeartbeat(Status(StatusCode::kAborted, "fenced: zone/z1 generation 7 < 99"));
  writer_.SetCurrentGeneration(99);
  Beat([&] { return host_->stats().heartbeat_failures == 1; });
  EXPECT_EQ(host_->CheckReadiness().reason, "superseded: generation 99 holds this instance id");
  EXPECT_EQ(writer_.Count("register"), 1u);  // only the first one
  host_->Shutdown();
  EXPECT_EQ(writer_.Count("deregister"), 0u);  // that would be the other process's entry
}

TEST_F(HostCoreTest, AClockBasedGenerationBelowATombstoneRegistersAboveIt) {
  // The wall clock stepped back two hours since an earlier incarnation of z1 was removed.
  HostOptions o = Options();
  o.generation = 0;
  const auto wall_ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_.SystemNow().time_since_epoch())
          .count());
  const std::uint64_t tombstone = wall_ms + 2 * 3600 * 1000;
  writer_.SetFencedUpTo(tombstone);
  Make(std::move(o));
  ASSERT_TRUE(host_->Start().ok());
  EXPECT_EQ(host_->generation(), tombstone + 1);
  EXPECT_EQ(writer_.Count("register"), 2u);
  EXPECT_EQ(writer_.Count("register " + std::to_string(tombstone + 1)), 1u);
  host_->Shutdown();
  EXPECT_EQ(writer_.Count("deregister " + std::to_string(tombstone + 1)), 1u);
}

TEST_F(HostCoreTest, AGivenGenerationIsNeverRaisedPastAFence) {
  writer_.SetFencedUpTo(10);
  Make(Options());  // generation 7
  const Status s = host_->Start();
  EXPECT_TRUE(IsFenced(s)) << s.ToString();
  EXPECT_EQ(FencedNewestGeneration(s), 10u);
  EXPECT_EQ(writer_.Count("register"), 1u);
}

TEST_F(HostCoreTest, AFailingReadinessCheckStopsNewConnectionsWithoutLosingTheLease) {
  std::atomic<bool> db_ok{true};
  HostOptions o = Options();
  o.readiness.push_back(
      {"db", [&] { return db_ok ? Status::Ok() : UnavailableError("connection refused"); }});
  Make(std::move(o));
  ASSERT_TRUE(host_->Start().ok());
  db_ok = false;
  EXPECT_EQ(host_->CheckReadiness().reason, "check 'db' failing: connection refused");
  Beat([&] { return writer_.Count("set 7 not-accepting") == 1; });
  db_ok = true;
  Beat([&] { return writer_.Count("set 7 accepting") == 1; });
  EXPECT_EQ(writer_.Count("heartbeat 7"), 2u);
}

// Zone full: SetAccepting(false) is told to the registry by the (hastened) heartbeat, readiness
// stays; heartbeats do not undo it, and a readiness flap while full does not re-open the instance.
TEST_F(HostCoreTest, SetAcceptingChangesCapacityButNotReadiness) {
  std::atomic<bool> db_ok{true};
  HostOptions o = Options();
  o.readiness.push_back(
      {"db", [&] { return db_ok ? Status::Ok() : UnavailableError("connection refused"); }});
  Make(std::move(o));
  ASSERT_TRUE(host_->SetAccepting(false, "before start").ok());  // carried by registration
  ASSERT_TRUE(host_->Start().ok());
  EXPECT_EQ(writer_.Count("register 7 not-accepting"), 1u);
  EXPECT_TRUE(host_->CheckReadiness().ready);  // /ready stays 200
  ASSERT_TRUE(host_->SetAccepting(true, "room").ok());
  Beat([&] { return writer_.Count("set 7 accepting") == 1; });
  ASSERT_TRUE(host_->SetAccepting(true, "room").ok());  // no change: nothing to write
  Beat([&] { return writer_.Count("heartbeat 7") >= 2; });
  EXPECT_EQ(writer_.Count("set 7 accepting"), 1u);
  ASSERT_TRUE(host_->SetAccepting(false, "2 players").ok());
  Beat([&] { return writer_.Count("set 7 not-accepting") == 1; });
  EXPECT_TRUE(host_->CheckReadiness().ready);
  Beat([&] { return writer_.Count("heartbeat 7") >= 4; });
  EXPECT_EQ(writer_.Count("set 7 accepting"), 1u);  // the heartbeats did not undo it
  db_ok = false;
  Beat([&] { return writer_.Count("heartbeat 7") >= 5; });
  db_ok = true;
  Beat([&] { return writer_.Count("heartbeat 7") >= 6; });
  EXPECT_EQ(writer_.Count("set 7 accepting"), 1u);  // still full: readiness back is not room
  EXPECT_NE(host_->Metrics().find("drover_host_full 1"), std::string::npos) << host_->Metrics();
}

// /metrics on the probe port follows the life cycle, and its address is registered for Prometheus
// next to drover.health.
TEST_F(HostCoreTest, MetricsFollowTheLifeCycleOnTheRegisteredProbePort) {
  std::atomic<bool> db_ok{true};
  HostOptions o = Options();
  o.version = "1.2";
  o.readiness.push_back({"db", [&] { return db_ok ? Status::Ok() : UnavailableError("down"); }});
  Make(std::move(o));
  const std::uint16_t probe = host_->health_port();
  auto scrape = [&] { return testing::Http(probe, "GET", "/metrics"); };
  auto has = [&](const std::string& line) {
    return scrape().body.find(line + "\n") != std::string::npos;
  };

  const auto before = scrape();
  ASSERT_EQ(before.status, 200);
  EXPECT_NE(before.headers.find("Content-Type: text/plain; version=0.0.4"), std::string::npos)
      << before.headers;
  EXPECT_NE(before.body.find("# TYPE drover_host_state gauge\n"), std::string::npos);
  EXPECT_NE(
      before.body.find(R"(drover_host_info{service="zone",instance="z1",version="1.2",zone=""} 1)"),
      std::string::npos)
      << before.body;
  EXPECT_TRUE(has(R"(drover_host_state{state="starting"} 1)"));
  EXPECT_TRUE(has(R"(drover_host_state{state="ready"} 0)"));
  EXPECT_TRUE(has("drover_host_generation 0"));

  ASSERT_TRUE(host_->Start().ok());
  const std::string probe_address = "127.0.0.1:" + std::to_string(probe);
  EXPECT_EQ(writer_.last_labels().at(std::string(kMetricsLabel)), probe_address);
  EXPECT_EQ(writer_.last_labels().at(std::string(kHealthLabel)), probe_address);
  EXPECT_TRUE(has(R"(drover_host_state{state="ready"} 1)"));
  EXPECT_TRUE(has(R"(drover_host_state{state="starting"} 0)"));
  EXPECT_TRUE(has("drover_host_generation 7"));
  EXPECT_TRUE(has("drover_host_accepting 1"));
  EXPECT_TRUE(has("drover_host_sessions 0"));

  Beat([&] { return host_->stats().heartbeats == 1; });
  EXPECT_TRUE(has("drover_host_heartbeats_total 1"));
  db_ok = false;
  EXPECT_TRUE(has(R"(drover_host_state{state="not_ready"} 1)"));
  Beat([&] { return writer_.Count("set 7 not-accepting") == 1; });
  // Published after the registry answered, which the fake records first.
  EXPECT_TRUE(Eventually([&] { return has("drover_host_accepting 0"); }));
  writer_.SetHeartbeat(UnavailableError("registry down"));
  Beat([&] { return host_->stats().heartbeat_failures == 1; });
  EXPECT_TRUE(has("drover_host_heartbeat_failures_total 1"));

  // Shutdown stops the probe port with the rest: what it says while draining is read from the
  // same function.
  host_->Shutdown();
  EXPECT_NE(host_->Metrics().find("drover_host_state{state=\"draining\"} 1\n"), std::string::npos);
  EXPECT_NE(host_->Metrics().find("drover_host_generation 0\n"), std::string::npos);
}

TEST_F(HostCoreTest, ShutdownOfAnIdleHostDoesNotWaitForTheHeartbeatTimer) {
  HostOptions o = Options();
  o.heartbeat_interval = 10s;  // fake time never gets there: only a wake-up can end the wait
  Make(std::move(o));
  ASSERT_TRUE(host_->Start().ok());
  ASSERT_TRUE(clock_.AwaitSleepers(1, 10s));
  host_->Shutdown();  // would hang here if stop did not wake the timer
  const auto steps = host_->shutdown_steps();
  ASSERT_EQ(steps.size(), 5u);
  EXPECT_EQ(steps[0].name, "deregister");
  EXPECT_EQ(steps[4].name, "stop-timers");
}

TEST(HostOptionsTest, RejectsOptionsThatCannotWork) {
  HostOptions o = Options();
  o.propagation_delay = 20s;
  o.drain_deadline = 20s;
  o.grace_period = 30s;
  EXPECT_EQ(NormalizeHostOptions(o).code(), StatusCode::kInvalidArgument);
  o = Options();
  o.heartbeat_interval = 40s;  // above the ttl: the lease would lapse between beats
  EXPECT_EQ(NormalizeHostOptions(o).code(), StatusCode::kInvalidArgument);
  o = Options();
  o.on_session = nullptr;  // no listener and no advertised address
  EXPECT_EQ(NormalizeHostOptions(o).code(), StatusCode::kInvalidArgument);
  o = Options();
  o.listen = "localhost:http";  // IPv4 host:port only, refused before any warm-up runs
  EXPECT_EQ(NormalizeHostOptions(o).code(), StatusCode::kInvalidArgument);
  o = Options();
  o.instance_id.clear();
  o.heartbeat_interval = Duration::zero();
  ASSERT_TRUE(NormalizeHostOptions(o).ok());
  EXPECT_FALSE(o.instance_id.empty());
  EXPECT_EQ(o.heartbeat_interval, 10s);
}

}  // namespace
}  // namespace drover::sdk
