// Seed 000 replayed end to end: a registry, the gateway and three zone servers (5 s warm-up) in
// one process over real loopback sockets, players opening 200 sessions/s and holding each 2 s,
// and a rolling deploy of all three servers one by one.
//
// With Drover (ServerHost order, P2C + slow start): no player sees a failed connect or a broken
// session, a new instance's share of new sessions in its first 5 s stays near its slow-start
// weight's share, and no session starts on an instance after it began draining.
// With the incident's configuration (registered before warm-up, plain least connections, the
// port closed before leaving discovery) the same deploy fails players -- the test shows both.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <thread>

#include "demo/zone_load.h"
#include "drover/host.h"
#include "gateway/gateway.h"
#include "registry/grpc_api.h"
#include "registry/registry.h"
#include "registry/sqlite_store.h"
#include "sdk/session_server.h"
#include "testing/eventually.h"
#include "testing/free_port.h"
#include "testing/temp_dir.h"
#include "zone_protocol.h"

namespace drover::gateway {
namespace {

using namespace std::chrono_literals;
using demo::SessionOutcome;
using demo::SessionRecord;
using demo::ZoneLoad;
using demo::ZoneLoadOptions;
using testing::Eventually;

constexpr Duration kWarmup = 5s;
constexpr Duration kSlowStart = 10s;
constexpr double kMinWeight = 0.1;
constexpr Duration kShareWindow = 5s;

// A zone server as the incident had it: registered READY before warm-up (nothing listens yet),
// and at shutdown the port closes (sessions cut) before it leaves discovery.
class NaiveZone {
 public:
  NaiveZone(registry::Registry& registry, std::string id)
      : registry_(registry), id_(std::move(id)) {}
  void Start() {
    address_ = testing::FreeLoopbackAddress();
    registry::InstanceSpec spec;
    spec.address = address_;
    spec.generation = 1;
    spec.state = registry::InstanceState::kReady;
    spec.ttl_ms = 60'000;
    ASSERT_TRUE(registry_.Register("zone", id_, spec).ok());
    std::this_thread::sleep_for(kWarmup);  // "warming up" while already in discovery
    ASSERT_TRUE(sessions_.Open(address_).ok());
    sessions_.Serve([id = id_](Session& s) { examples::ServeZoneSession(s, id); });
  }
  void Shutdown() {
    sessions_.StopAccepting();
    sessions_.Drain(Duration::zero());
    ASSERT_TRUE(registry_.Deregister("zone", id_, 1).ok());
  }

 private:
  registry::Registry& registry_;
  std::string id_;
  std::string address_;
  sdk::SessionServer sessions_;
};

struct Timeline {
  std::map<std::string, MonoTime> ready;     // when each instance became routable
  std::map<std::string, MonoTime> draining;  // when each began leaving
};

// Slow start's weight at `t` for an instance READY at `since`: max(min, (t - since) / window).
double Weight(MonoTime since, MonoTime t) {
  const double ramp =
      std::chrono::duration<double>(t - since) / std::chrono::duration<double>(kSlowStart);
  return std::clamp(ramp, kMinWeight, 1.0);
}

struct ShareReport {
  double actual = 0;    // the instance's share of sessions started in its window
  double expected = 0;  // its mean slow-start weight share over those sessions
  std::size_t sessions = 0;
};

ShareReport ShareOf(const std::string& id, const Timeline& tl,
                    const std::vector<SessionRecord>& records) {
  const MonoTime from = tl.ready.at(id);
  ShareReport r;
  std::size_t mine = 0;
  for (const SessionRecord& s : records) {
    if (s.started < from || s.started >= from + kShareWindow) continue;
    ++r.sessions;
    mine += s.instance == id ? 1 : 0;
    double total = 0;
    for (const auto& [other, since] : tl.ready) {
      const auto d = tl.draining.find(other);
      if (since <= s.started && (d == tl.draining.end() || s.started < d->second)) {
        total += Weight(since, s.started);
      }
    }
    r.expected += Weight(from, s.started) / total;
  }
  if (r.sessions > 0) {
    r.actual = static_cast<double>(mine) / static_cast<double>(r.sessions);
    r.expected /= static_cast<double>(r.sessions);
  }
  return r;
}

std::map<SessionOutcome, std::size_t> Outcomes(const std::vector<SessionRecord>& records) {
  std::map<SessionOutcome, std::size_t> n;
  for (const SessionRecord& s : records) ++n[s.outcome];
  return n;
}

void Print(const std::string& title, const std::vector<SessionRecord>& records) {
  std::cout << title << ": " << records.size() << " sessions;";
  for (const auto& [outcome, count] : Outcomes(records)) {
    std::cout << " " << SessionOutcomeName(outcome) << "=" << count;
  }
  std::cout << "\n";
}

class RollingDeployTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = registry::SqliteStore::Open(dir_.path());
    ASSERT_TRUE(store.ok());
    registry_ = registry::Registry::Open(std::move(*store), clock_).value();
    registry::GrpcOptions options;
    options.address = "127.0.0.1:0";
    server_ = registry::GrpcServer::Start(*registry_, options).value();
  }
  void TearDown() override {
    if (gateway_) gateway_->Shutdown();
    server_->Stop();
  }

  void StartGateway(Policy policy, int connect_attempts) {
    GatewayConfig c;
    c.registry = "127.0.0.1:" + std::to_string(server_->port());
    c.threads = 2;
    c.admin = "";
    c.drain = 1s;
    ListenerConfig l;
    l.name = "zone";
    l.address = "127.0.0.1:0";
    l.service = "zone";
    l.policy = policy;
    l.slow_start = kSlowStart;
    l.slow_start_min_percent = kMinWeight * 100;
    l.connect_attempts = connect_attempts;
    if (policy == Policy::kLeastConn) {
      // The incident's gateway had neither health checks nor outlier ejection: without this, the
      // gateway ejects the instance that refuses during its warm-up and hides the incident.
      l.health_check_interval = Duration::zero();
      l.eject_after_failures = 1'000'000;
    }
    c.listeners.push_back(l);
    gateway_ = Gateway::Start(c, clock_).value();
  }

  std::unique_ptr<ServerHost> StartZone(const std::string& id) {
    HostOptions o;
    o.registry = "127.0.0.1:" + std::to_string(server_->port());
    o.service = "zone";
    o.instance_id = id;
    o.ttl = 10s;
    o.propagation_delay = 1s;
    o.drain_deadline = 5s;  // longer than a session: every player finishes
    o.grace_period = 10s;
    o.warmup.push_back({"map data", [](std::stop_token stop) {
                          RealClock().SleepFor(kWarmup, stop);
                          return Status::Ok();
                        }});
    o.on_session = [id](Session& s) { examples::ServeZoneSession(s, id); };
    auto host = ServerHost::Create(o, runtime_).value();
    EXPECT_TRUE(host->Start().ok());
    return host;
  }

  // Routable instances in the gateway's table, from its admin view.
  bool GatewayRoutes(const std::string& id, bool routable) const {
    const std::string json = gateway_->SnapshotJson();
    const std::string needle = "\"id\": \"" + id + "\"";
    const std::size_t at = json.find(needle);
    if (at == std::string::npos) return !routable;
    const std::size_t end = json.find('}', at);
    const bool is = json.substr(at, end - at).find("\"routable\": true") != std::string::npos;
    return is == routable;
  }

  ZoneLoadOptions Load() const {
    ZoneLoadOptions o;
    o.target = "127.0.0.1:" + std::to_string(gateway_->port("zone"));
    o.sessions_per_second = 200;
    o.hold = 2s;
    o.ping_every = 500ms;
    return o;
  }

  testing::TempDir dir_;
  RealClock clock_;
  std::unique_ptr<registry::Registry> registry_;
  std::unique_ptr<registry::GrpcServer> server_;
  std::unique_ptr<Gateway> gateway_;
  std::shared_ptr<HostRuntime> runtime_ = HostRuntime::Create();
};

TEST_F(RollingDeployTest, NoPlayerNoticesARollingDeployWithDrover) {
  StartGateway(Policy::kP2c, 3);
  Timeline tl;
  std::vector<std::unique_ptr<ServerHost>> old(3);
  {
    std::vector<std::thread> starting;
    for (int i = 0; i < 3; ++i) {
      starting.emplace_back([&, i] { old[i] = StartZone("z" + std::to_string(i)); });
    }
    for (auto& t : starting) t.join();
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Eventually([&] { return GatewayRoutes("z" + std::to_string(i), true); }));
    tl.ready["z" + std::to_string(i)] = clock_.Now();
  }

  ZoneLoad load(Load());
  load.Start();
  std::this_thread::sleep_for(3s);
  std::vector<std::unique_ptr<ServerHost>> fresh;
  for (int i = 0; i < 3; ++i) {
    const std::string id = "z" + std::to_string(i) + "-v2";
    fresh.push_back(StartZone(id));  // blocks through the 5 s warm-up
    ASSERT_TRUE(Eventually([&] { return GatewayRoutes(id, true); }));
    tl.ready[id] = clock_.Now();
    tl.draining["z" + std::to_string(i)] = clock_.Now();
    old[i]->Shutdown();  // DRAINING + deregister, 1 s, close, sessions finish
    const auto steps = old[i]->shutdown_steps();
    std::cout << "z" << i << " shutdown:";
    for (const ShutdownStep& s : steps) {
      std::cout << " " << s.name << "=" << std::chrono::duration<double, std::milli>(s.took).count()
                << "ms";
    }
    std::cout << "\n";
  }
  std::this_thread::sleep_for(kShareWindow);
  load.Stop();
  const std::vector<SessionRecord> records = load.records();
  Print("drover", records);

  const auto outcomes = Outcomes(records);
  EXPECT_GT(records.size(), 3000u);
  EXPECT_EQ(outcomes.count(SessionOutcome::kConnectFailed), 0u);
  EXPECT_EQ(outcomes.count(SessionOutcome::kNoWelcome), 0u);
  EXPECT_EQ(outcomes.count(SessionOutcome::kBroken), 0u);

  // No session starts on an instance after it began draining (a little slack for the watch to
  // reach the gateway: it is measured in milliseconds, the slack is 300 ms).
  for (const SessionRecord& s : records) {
    const auto d = tl.draining.find(s.instance);
    if (d != tl.draining.end()) {
      EXPECT_LT(s.started, d->second + 300ms) << "a session started on draining " << s.instance;
    }
  }
  for (int i = 0; i < 3; ++i) {
    const std::string id = "z" + std::to_string(i) + "-v2";
    const ShareReport r = ShareOf(id, tl, records);
    std::cout << id << " first " << std::chrono::duration<double>(kShareWindow).count()
              << " s: share of new sessions " << r.actual << ", slow-start weight share "
              << r.expected << " (" << r.sessions << " sessions)\n";
    EXPECT_GT(r.sessions, 500u);
    EXPECT_LE(r.actual, r.expected + 0.12) << id;
  }
  for (auto& h : fresh) h->Shutdown();
}

TEST_F(RollingDeployTest, TheIncidentsConfigurationFailsPlayersInTheSameDeploy) {
  StartGateway(Policy::kLeastConn, 1);
  std::vector<std::unique_ptr<NaiveZone>> old;
  {
    std::vector<std::thread> starting;
    for (int i = 0; i < 3; ++i) {
      old.push_back(std::make_unique<NaiveZone>(*registry_, "z" + std::to_string(i)));
    }
    for (int i = 0; i < 3; ++i) starting.emplace_back([&, i] { old[i]->Start(); });
    for (auto& t : starting) t.join();
  }
  ZoneLoad load(Load());
  load.Start();
  std::this_thread::sleep_for(3s);
  std::vector<std::unique_ptr<NaiveZone>> fresh;
  for (int i = 0; i < 3; ++i) {
    fresh.push_back(std::make_unique<NaiveZone>(*registry_, "z" + std::to_string(i) + "-v2"));
    fresh.back()->Start();  // in discovery for 5 s before it listens
    old[i]->Shutdown();     // port closed, sessions cut, then deregistered
  }
  std::this_thread::sleep_for(2s);
  load.Stop();
  const std::vector<SessionRecord> records = load.records();
  Print("incident configuration", records);
  const auto outcomes = Outcomes(records);
  const std::size_t failed =
      records.size() - (outcomes.count(SessionOutcome::kOk) ? outcomes.at(SessionOutcome::kOk) : 0);
  EXPECT_GT(failed, records.size() / 10);  // players notice: refused, cut, or never welcomed
  for (auto& z : fresh) z->Shutdown();
}

}  // namespace
}  // namespace drover::gateway
