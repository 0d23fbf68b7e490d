// Clients across machines: every client of the registry takes several registries and fails over
// without a gap, and comes back soon after a registry restarts. Real processes on loopback, each
// "machine" on its own address: registries on 127.0.0.2 and 127.0.0.3, the gateway on 127.0.0.4,
// zone servers on 127.0.0.5 and up; players, a DiscoveryClient and a ServiceChannel in the test.
//
//   - A three-member etcd cluster, registries A and B over it, everyone configured with both:
//     SIGKILL A under >= 100 player sessions/s, then (A back) SIGKILL B. No session fails, no
//     zone server's lease lapses (no DELETE, same generation), the DiscoveryClient sees every
//     later change exactly once (no RESYNC, no duplicate), the ServiceChannel keeps its channel.
//   - One SQLite registry stopped for 3, 8 and 15 s (instances' TTL 5 s) and restarted on the
//     same ports: every client talks to it again within 3 s (the reconnect backoff is capped at
//     1 s), no lease lapses, no re-registration, no session fails.
// Each prints the figures it measured (gaps, delays, closest a lease came to lapsing).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "drover/discovery.h"
#include "drover/grpc.h"
#include "testing/child_process.h"
#include "testing/etcd_cluster.h"
#include "testing/eventually.h"
#include "testing/free_port.h"
#include "testing/http_client.h"
#include "testing/line_client.h"
#include "testing/temp_dir.h"

namespace drover {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::ChildProcess;
using testing::Eventually;
using testing::HttpTo;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kTtlMs = 5000;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// A registry process on its own "machine" at fixed ports, so that it restarts where everyone
// looks for it.
struct RegistryNode {
  explicit RegistryNode(std::string h) : host(std::move(h)) {}
  std::string host;
  std::uint16_t http = testing::FreeLoopbackPort();
  std::uint16_t grpc = testing::FreeLoopbackPort();
  std::vector<std::string> flags;  // the store's
  std::unique_ptr<ChildProcess> child;
  Clock::time_point started{};

  std::string grpc_address() const { return host + ":" + std::to_string(grpc); }
  bool Start(const std::string& binary) {
    std::vector<std::string> argv = {
        binary,   "registry",     "--http",    host + ":" + std::to_string(http),
        "--grpc", grpc_address(), "--tick-ms", "100"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    child = std::make_unique<ChildProcess>(argv);
    const bool up = child->ReadLine(20s).has_value();
    started = Clock::now();
    return up;
  }
  void Stop(int signal) {
    child->Signal(signal);
    child->Wait();
    child.reset();
  }
  bool alive() const { return child != nullptr; }
};

// The zone instances as one registry lists them: id -> (generation, lease remaining ms).
std::map<std::string, std::pair<std::uint64_t, std::int64_t>> ZoneLeases(const RegistryNode& r) {
  std::map<std::string, std::pair<std::uint64_t, std::int64_t>> out;
  const auto reply = HttpTo(r.host, r.http, "GET", "/v1/services/zone/instances");
  const json body = json::parse(reply.body, nullptr, false);
  if (reply.status != 200 || !body.is_object()) return out;
  for (const auto& in : body["instances"]) {
    out[in["id"].get<std::string>()] = {in["generation"].get<std::uint64_t>(),
                                        in["lease_remaining_ms"].get<std::int64_t>()};
  }
  return out;
}

// The gateway's figure `name` for its zone listener from /metrics; -1 when absent.
double GatewayMetric(const std::string& host, std::uint16_t admin, const std::string& name) {
  const auto metrics = HttpTo(host, admin, "GET", "/metrics");
  std::smatch m;
  const std::regex re(name + R"(\{[^}]*\} ([0-9.e+-]+))");
  if (!std::regex_search(metrics.body, m, re)) return -1;
  return std::stod(m[1].str());
}

class RegistryFailoverTest : public ::testing::Test {
 protected:
  void TearDown() override {
    StopPlayers();
    if (channel_) channel_.reset();
    if (discovery_) discovery_->Stop();
    gateway_.reset();
    zones_.clear();
  }

  std::string Registries() const {
    std::string list;
    for (const RegistryNode* r : registries_) list += (list.empty() ? "" : ",") + r->grpc_address();
    return list;
  }

  // Zone servers z1..zN on 127.0.0.5, 127.0.0.6, ..., a gateway on 127.0.0.4, a DiscoveryClient
  // and a ServiceChannel here: all with every registry of `registries_`.
  void StartClients(int zones) {
    for (int i = 1; i <= zones; ++i) {
      const std::string host = "127.0.0." + std::to_string(4 + i);
      zones_.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{
          DROVER_BINARY, "sample", "zone", "--registry", Registries(), "--id",
          "z" + std::to_string(i), "--listen",
          host + ":" + std::to_string(testing::FreeLoopbackPort()), "--health",
          host + ":" + std::to_string(testing::FreeLoopbackPort()), "--warmup-ms", "0", "--ttl-ms",
          std::to_string(kTtlMs), "--log-level", "warn"}));
    }
    admin_ = testing::FreeLoopbackPort();
    players_ = testing::FreeLoopbackPort();
    {
      std::ofstream config(dir_.path() + "/gateway.yaml");
      config << "registry:\n";
      for (const RegistryNode* r : registries_) config << "  - " << r->grpc_address() << "\n";
      config << "admin: " << kGateway << ":" << admin_ << "\nthreads: 1\nlisteners:\n"
             << "  - name: zone\n    address: " << kGateway << ":" << players_
             << "\n    service: zone\n";
    }
    gateway_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{DROVER_BINARY, "--log-level", "warn", "gateway", "--config",
                                 dir_.path() + "/gateway.yaml"});
    ASSERT_TRUE(gateway_->ReadLine(20s).has_value());

    DiscoveryOptions d;
    d.registry = Registries();
    d.service = "zone";
    discovery_ = DiscoveryClient::Start(d, clock_).value();
    channel_ = grpc_defaults::ServiceChannel::Start(d, {}, clock_).value();

    ASSERT_TRUE(Eventually(
        [&] {
          const auto snapshot = discovery_->Snapshot();
          return snapshot.ok() && snapshot->table->size() == static_cast<std::size_t>(zones) &&
                 Session();
        },
        30s))
        << "the zone servers should be registered and reachable through the gateway";
  }

  // One player session through the gateway: HELLO, WELCOME from a zone server, QUIT, BYE.
  bool Session() const {
    testing::LineClient c(kGateway, players_);
    const auto welcome = c.Ask("HELLO p");
    return welcome && welcome->rfind("WELCOME z", 0) == 0 && c.Ask("QUIT") == "BYE";
  }

  // Players at `rate` new sessions per second over a few threads, until StopPlayers().
  void StartPlayers(int rate) {
    players_started_ = Clock::now();
    constexpr int kThreads = 3;
    for (int t = 0; t < kThreads; ++t) {
      players_threads_.emplace_back([this, rate](std::stop_token stop) {
        const auto period = std::chrono::microseconds(1'000'000 * kThreads / rate);
        auto next = Clock::now();
        while (!stop.stop_requested()) {
          (Session() ? sessions_ : failed_).fetch_add(1);
          next += period;
          std::this_thread::sleep_until(next);
        }
      });
    }
  }
  // Ends the players; their sessions per second.
  double StopPlayers() {
    if (players_threads_.empty()) return 0;
    players_threads_.clear();  // request_stop + join
    const double seconds = std::chrono::duration<double>(Clock::now() - players_started_).count();
    return (sessions_.load() + failed_.load()) / seconds;
  }

  // Watches every live registry's list of the zone service, 10 times a second: the smallest
  // lease remaining of any zone server (how close a lease came to lapsing), and whether one was
  // missing or came back with another generation (a lapse or a re-registration).
  void StartLeaseMonitor() {
    generations_ = ZoneLeases(*registries_.front());
    monitor_ = std::jthread([this](std::stop_token stop) {
      while (!stop.stop_requested()) {
        for (RegistryNode* r : registries_) {
          if (!r->alive()) continue;
          const auto leases = ZoneLeases(*r);
          if (leases.empty()) continue;  // not answering (killed just now, or starting)
          for (const auto& [id, first] : generations_) {
            const auto it = leases.find(id);
            if (it == leases.end() || it->second.first != first.first) {
              lapses_.fetch_add(1);
            } else {
              std::int64_t seen = min_lease_ms_.load();
              while (it->second.second < seen &&
                     !min_lease_ms_.compare_exchange_weak(seen, it->second.second)) {
              }
            }
          }
        }
        std::this_thread::sleep_for(100ms);
      }
    });
  }

  // A change through `r` that the zone service's watchers see: a STARTING instance (never
  // routed to) put, or deleted. Its revision, or 0.
  static std::uint64_t Change(const RegistryNode& r, const std::string& id, bool put) {
    const auto reply = put ? HttpTo(r.host, r.http, "PUT", "/v1/services/zone/instances/" + id,
                                    R"({"address":"127.0.0.9:1","generation":1,"state":"STARTING",)"
                                    R"("ttl_ms":600000})")
                           : HttpTo(r.host, r.http, "DELETE",
                                    "/v1/services/zone/instances/" + id + "?generation=1");
    const json body = json::parse(reply.body, nullptr, false);
    if (reply.status != 200 || !body.is_object() || !body.contains("revision")) return 0;
    return body["revision"].get<std::uint64_t>();
  }

  // Kills `victim` (the clients' registry of the moment, for some of them), then makes six
  // changes through `survivor`: the DiscoveryClient must see exactly those six, after which the
  // gateway is at the same revision. Prints what it measured.
  void KillAndCheck(RegistryNode& victim, RegistryNode& survivor, const std::string& phase) {
    const DiscoveryStats before = discovery_->Stats();
    const std::uint64_t builds = channel_->builds();
    const auto killed = Clock::now();
    victim.Stop(SIGKILL);
    // Long enough for every zone server to heartbeat (on the survivor) and the expirer role to
    // move, if the victim held it.
    std::this_thread::sleep_for(4s);
    std::uint64_t last = 0;
    for (int i = 0; i < 3; ++i) {
      const std::string id = "probe-" + phase + "-" + std::to_string(i);
      ASSERT_NE(Change(survivor, id, true), 0u) << id;
      last = Change(survivor, id, false);
      ASSERT_NE(last, 0u) << id;
    }
    ASSERT_TRUE(discovery_->WaitForRevision(last, 10s)) << "the DiscoveryClient should follow";
    const DiscoveryStats after = discovery_->Stats();
    EXPECT_EQ(after.events - before.events, 6u) << "every change exactly once";
    EXPECT_EQ(after.deletes - before.deletes, 3u) << "no DELETE but the probes'";
    EXPECT_EQ(after.resyncs, before.resyncs) << "resumed from its revision, not resynced";
    EXPECT_EQ(after.registry, survivor.grpc_address());
    EXPECT_TRUE(after.connected);
    EXPECT_EQ(channel_->builds(), builds) << "the ServiceChannel lost no instance";
    EXPECT_TRUE(Eventually(
        [&] {
          return GatewayMetric(kGateway, admin_, "drover_gateway_routing_table_version") >=
                 static_cast<double>(last);
        },
        10s))
        << "the gateway should follow on " << survivor.host;
    std::printf(
        "failover %s: %s SIGKILLed; DiscoveryClient now on %s, longest gap %.0f ms, %llu "
        "events for 6 changes, %llu resyncs; gateway longest gap %.0f ms, %0.f watches; "
        "ServiceChannel builds %llu -> %llu; %.1f s after the kill\n",
        phase.c_str(), victim.host.c_str(), after.registry.c_str(), Ms(after.longest_gap),
        static_cast<unsigned long long>(after.events - before.events),
        static_cast<unsigned long long>(after.resyncs - before.resyncs),
        1000 * GatewayMetric(kGateway, admin_, "drover_gateway_discovery_longest_gap_seconds"),
        GatewayMetric(kGateway, admin_, "drover_gateway_discovery_watches_total"),
        static_cast<unsigned long long>(builds),
        static_cast<unsigned long long>(channel_->builds()),
        std::chrono::duration<double>(Clock::now() - killed).count());
  }

  static constexpr const char* kGateway = "127.0.0.4";
  testing::TempDir dir_;
  RealClock clock_;
  std::vector<RegistryNode*> registries_;
  std::vector<std::unique_ptr<ChildProcess>> zones_;
  std::unique_ptr<ChildProcess> gateway_;
  std::uint16_t admin_ = 0;
  std::uint16_t players_ = 0;
  std::unique_ptr<DiscoveryClient> discovery_;
  std::unique_ptr<grpc_defaults::ServiceChannel> channel_;

  std::vector<std::jthread> players_threads_;
  Clock::time_point players_started_{};
  std::atomic<int> sessions_{0};
  std::atomic<int> failed_{0};

  std::map<std::string, std::pair<std::uint64_t, std::int64_t>> generations_;
  std::atomic<std::int64_t> min_lease_ms_{kTtlMs};
  std::atomic<int> lapses_{0};
  std::jthread monitor_;
};

TEST_F(RegistryFailoverTest, EveryClientFailsOverWhenARegistryOfTheClusterIsKilled) {
  testing::EtcdCluster etcd(3);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  ASSERT_GE(etcd.WaitForLeader(), 0);
  RegistryNode a("127.0.0.2"), b("127.0.0.3");
  for (RegistryNode* r : {&a, &b}) {
    r->flags = {"--store",       "etcd",      "--etcd-endpoints",   etcd.endpoints_csv(),
                "--etcd-prefix", "/failover", "--etcd-session-ttl", "2"};
    ASSERT_TRUE(r->Start(DROVER_BINARY)) << r->host;
    registries_.push_back(r);
  }
  ASSERT_NO_FATAL_FAILURE(StartClients(4));
  StartLeaseMonitor();
  StartPlayers(150);
  std::this_thread::sleep_for(2s);

  ASSERT_NO_FATAL_FAILURE(KillAndCheck(a, b, "A"));
  ASSERT_TRUE(a.Start(DROVER_BINARY)) << "A restarts on its ports";
  std::this_thread::sleep_for(2s);
  ASSERT_NO_FATAL_FAILURE(KillAndCheck(b, a, "B"));
  std::this_thread::sleep_for(1s);

  const double rate = StopPlayers();
  monitor_ = {};
  std::printf(
      "failover: %d player sessions at %.0f/s, %d failed; closest a zone server's lease came "
      "to lapsing: %lld ms left of %lld; lapses or re-registrations seen: %d\n",
      sessions_.load(), rate, failed_.load(), static_cast<long long>(min_lease_ms_.load()),
      static_cast<long long>(kTtlMs), lapses_.load());
  EXPECT_EQ(failed_.load(), 0);
  EXPECT_GE(rate, 100.0);
  EXPECT_EQ(lapses_.load(), 0);
  EXPECT_GT(min_lease_ms_.load(), 0);
  EXPECT_EQ(ZoneLeases(a).size(), 4u);
}

TEST_F(RegistryFailoverTest, EveryClientIsBackSoonAfterARegistryRestarts) {
  RegistryNode r("127.0.0.2");
  r.flags = {"--data-dir", dir_.path() + "/registry"};
  ASSERT_TRUE(r.Start(DROVER_BINARY));
  registries_.push_back(&r);
  ASSERT_NO_FATAL_FAILURE(StartClients(2));
  StartLeaseMonitor();
  StartPlayers(100);
  std::this_thread::sleep_for(1s);

  for (const auto& [seconds, signal] : {std::pair{3, SIGTERM}, {8, SIGKILL}, {15, SIGTERM}}) {
    const std::uint64_t watches = discovery_->Stats().watches;
    const double gateway_watches =
        GatewayMetric(kGateway, admin_, "drover_gateway_discovery_watches_total");
    r.Stop(signal);
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    ASSERT_TRUE(r.Start(DROVER_BINARY));
    // From the registry's start-up line: when each client talks to it again -- the watchers
    // open a new stream, each zone server's lease is renewed by a heartbeat (it grows again
    // after the fresh lease the restart granted).
    std::optional<double> client_ms, gateway_ms;
    std::map<std::string, double> zone_ms;
    std::map<std::string, std::int64_t> last_lease;
    const auto deadline = r.started + 5s;
    while (Clock::now() < deadline &&
           (!client_ms || !gateway_ms || zone_ms.size() < generations_.size())) {
      const double now_ms = Ms(Clock::now() - r.started);
      if (!client_ms && discovery_->Stats().watches > watches) client_ms = now_ms;
      if (!gateway_ms && GatewayMetric(kGateway, admin_, "drover_gateway_discovery_watches_total") >
                             gateway_watches) {
        gateway_ms = now_ms;
      }
      for (const auto& [id, lease] : ZoneLeases(r)) {
        const auto seen = last_lease.find(id);
        if (!zone_ms.contains(id) && seen != last_lease.end() && lease.second > seen->second + 50) {
          zone_ms[id] = now_ms;
        }
        last_lease[id] = lease.second;
      }
      std::this_thread::sleep_for(20ms);
    }
    std::printf(
        "registry stopped (signal %d) for %d s: back after: DiscoveryClient %.0f ms, "
        "gateway %.0f ms",
        signal, seconds, client_ms.value_or(-1), gateway_ms.value_or(-1));
    for (const auto& [id, ms] : zone_ms) std::printf(", zone server %s %.0f ms", id.c_str(), ms);
    std::printf("\n");
    EXPECT_LE(client_ms.value_or(1e9), 3000) << "the DiscoveryClient after " << seconds << " s";
    EXPECT_LE(gateway_ms.value_or(1e9), 3000) << "the gateway after " << seconds << " s";
    EXPECT_EQ(zone_ms.size(), generations_.size()) << "every zone server within 3 s";
    for (const auto& [id, ms] : zone_ms) EXPECT_LE(ms, 3000) << id;
  }
  const DiscoveryStats stats = discovery_->Stats();
  const double rate = StopPlayers();
  monitor_ = {};
  std::printf(
      "registry restarts: %d player sessions at %.0f/s, %d failed; lapses or re-registrations "
      "seen: %d; DiscoveryClient deletes %llu, longest gap %.0f ms\n",
      sessions_.load(), rate, failed_.load(), lapses_.load(),
      static_cast<unsigned long long>(stats.deletes), Ms(stats.longest_gap));
  EXPECT_EQ(failed_.load(), 0);
  EXPECT_EQ(lapses_.load(), 0);
  EXPECT_EQ(stats.deletes, 0u);
}

// Limits per identity, with the fleet's real gateway: one process, one address, one token, a
// hundred routes -- a hundred watch streams multiplexed on one gRPC connection. Every one is
// served with the registry's default limits (the old limit counted 64 per address).
TEST_F(RegistryFailoverTest, AGatewayWithAHundredRoutesAndOneTokenWatchesThemAll) {
  std::ofstream(dir_.path() + "/tokens.yaml")
      << "tokens:\n  - name: gateways\n    token: \"gateway-token-0123456789\"\n"
      << "    write: [drover-gateway]\n";
  RegistryNode r("127.0.0.2");
  r.flags = {"--data-dir", dir_.path() + "/registry", "--auth-tokens",
             dir_.path() + "/tokens.yaml"};
  ASSERT_TRUE(r.Start(DROVER_BINARY));
  const std::uint16_t admin = testing::FreeLoopbackPort();
  {
    std::ofstream config(dir_.path() + "/routes.yaml");
    config << "registry: " << r.grpc_address() << "\ntoken: gateway-token-0123456789\n"
           << "admin: " << kGateway << ":" << admin << "\nthreads: 1\nlisteners:\n"
           << "  - name: web\n    protocol: http\n    address: " << kGateway << ":0\n"
           << "    routes:\n";
    for (int i = 0; i < 100; ++i) {
      config << "      - prefix: /r" << i << "/\n        service: route" << i << "\n";
    }
  }
  ChildProcess gateway(
      {DROVER_BINARY, "--log-level", "warn", "gateway", "--config", dir_.path() + "/routes.yaml"});
  ASSERT_TRUE(gateway.ReadLine(20s).has_value());
  // Every route's discovery has a live watch: 100 times "connected 1" in /metrics.
  int connected = 0;
  EXPECT_TRUE(Eventually(
      [&] {
        const auto metrics = HttpTo(kGateway, admin, "GET", "/metrics").body;
        connected = 0;
        for (std::size_t at = metrics.find("drover_gateway_discovery_connected{");
             at != std::string::npos;
             at = metrics.find("drover_gateway_discovery_connected{", at + 1)) {
          const std::size_t end = metrics.find('\n', at);
          connected += metrics.compare(end - 2, 2, " 1") == 0 ? 1 : 0;
        }
        return connected == 100;
      },
      30s, 200ms))
      << connected << " of 100 routes connected";
  const auto registry_metrics = HttpTo(r.host, r.http, "GET", "/metrics").body;
  EXPECT_NE(registry_metrics.find("drover_registry_refused_watches_total 0"), std::string::npos)
      << "no watch was refused";
  std::printf(
      "a gateway with 100 routes and one token: %d routes watching, refused watches at "
      "the registry: %s\n",
      connected,
      registry_metrics.find("drover_registry_refused_watches_total 0") != std::string::npos
          ? "0"
          : "some");
}

// A registry that freezes (SIGSTOP: no reset, no FIN -- a host that vanished looks the same) is
// left too: its watch stream goes silent, the client's watchdog cancels it after
// watch_silence_limit, and the client resumes on the other registry.
TEST_F(RegistryFailoverTest, AWatcherLeavesARegistryThatFroze) {
  testing::EtcdCluster etcd(1);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  RegistryNode a("127.0.0.2"), b("127.0.0.3");
  for (RegistryNode* r : {&a, &b}) {
    r->flags = {"--store",       "etcd",    "--etcd-endpoints",   etcd.endpoints_csv(),
                "--etcd-prefix", "/frozen", "--etcd-session-ttl", "2"};
    ASSERT_TRUE(r->Start(DROVER_BINARY)) << r->host;
    registries_.push_back(r);
  }
  DiscoveryOptions d;
  d.registry = Registries();
  d.service = "zone";
  d.watch_silence_limit = 2s;
  discovery_ = DiscoveryClient::Start(d, clock_).value();
  // Where the watcher resumes must be inside B's history, which starts at B's opening (B keeps
  // no earlier events; from before it a resumed watch rightly resyncs). A watcher resumes from
  // its last revision known complete -- the one before its newest event's (a revision's events
  // may have arrived in part) -- so it holds two changes made after B opened before A freezes.
  ASSERT_NE(Change(b, "before", true), 0u);
  const std::uint64_t settled = Change(b, "settled", true);
  ASSERT_NE(settled, 0u);
  ASSERT_TRUE(discovery_->WaitForRevision(settled, 10s));
  ASSERT_EQ(discovery_->Stats().registry, a.grpc_address());

  ASSERT_TRUE(a.child->Freeze());
  const auto frozen = Clock::now();
  const std::uint64_t last = Change(b, "after", true);
  ASSERT_NE(last, 0u);
  const bool followed = discovery_->WaitForRevision(last, 10s);
  const double took = std::chrono::duration<double>(Clock::now() - frozen).count();
  a.child->Signal(SIGCONT);
  EXPECT_TRUE(followed) << "the change made through B should arrive";
  const DiscoveryStats stats = discovery_->Stats();
  EXPECT_EQ(stats.registry, b.grpc_address());
  EXPECT_EQ(stats.resyncs, 0u) << "resumed from its revision, never resynced";
  std::printf(
      "a frozen registry: the watcher moved to %s and had the next change %.1f s after "
      "the freeze (silence limit 2 s)\n",
      stats.registry.c_str(), took);
}

}  // namespace
}  // namespace drover
