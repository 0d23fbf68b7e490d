// Fault injection: a 3-member etcd cluster and two `drover registry` processes on it (one
// registry), a write storm of registrations, re-registrations (new generations) and heartbeats
// through both, and a watcher on the registry that will survive. In the middle of the storm the
// etcd leader is SIGKILLed, then the registry process that holds the expirer role.
//   - every write a registry acknowledged (HTTP 200) is there afterwards: on the survivor, and
//     on a registry started fresh from etcd;
//   - the watch stream keeps the protocol's promise (docs/ARCHITECTURE.md, "Watch"): never a
//     gap, never a duplicate, never out of order -- every acknowledged write reaches the watcher
//     as an event or inside a RESYNC, and the events rebuild exactly what the registry lists;
//   - leases still expire: an instance heartbeated through the kills, then left alone, expires
//     within its TTL plus the documented takeover bound (session TTL, twice as an etcd leader
//     change may renew the dead process's session once, + TTL / 5 + expiry grace).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "testing/etcd_cluster.h"
#include "testing/eventually.h"
#include "testing/http_client.h"
#include "testing/registry_process.h"
#include "testing/watch_stream.h"

namespace {

using namespace std::chrono_literals;
using drover::testing::EtcdCluster;
using drover::testing::Eventually;
using drover::testing::Http;
using drover::testing::RegistryProcess;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kSessionTtlS = 2;
constexpr auto kLeaseTtl = 2000ms;
// Takeover after the expirer dies: its session lapses (twice the TTL at worst: an etcd leader
// change renews etcd leases once), the survivor campaigns (TTL / 5) and waits the expiry grace
// (500 ms). One more second for a loaded 2-core machine.
constexpr auto kExpiryBound = 2 * std::chrono::seconds(kSessionTtlS) + 400ms + 500ms + 1s;

RegistryProcess StartEtcdRegistry(const EtcdCluster& etcd) {
  return drover::testing::StartRegistryProcess(
      DROVER_BINARY, {"--store", "etcd", "--etcd-endpoints", etcd.endpoints_csv(), "--etcd-prefix",
                      "/chaos", "--etcd-session-ttl", std::to_string(kSessionTtlS), "--http",
                      "127.0.0.1:0", "--grpc", "off", "--tick-ms", "100"});
}

bool IsExpirer(std::uint16_t port) {
  return Http(port, "GET", "/metrics").body.find("drover_registry_expirer 1\n") !=
         std::string::npos;
}

std::string Spec(std::uint64_t generation, std::int64_t ttl_ms) {
  return R"({"address":"127.0.0.1:9","generation":)" + std::to_string(generation) +
         R"(,"state":"READY","ttl_ms":)" + std::to_string(ttl_ms) + "}";
}

// id -> generation, as a registry lists a service; nullopt if it did not answer.
std::optional<std::map<std::string, std::uint64_t>> Listed(std::uint16_t port,
                                                           const std::string& service) {
  const auto reply = Http(port, "GET", "/v1/services/" + service + "/instances");
  if (reply.status != 200) return std::nullopt;
  const json body = json::parse(reply.body, nullptr, false);
  if (!body.is_object() || !body.contains("instances")) return std::nullopt;
  std::map<std::string, std::uint64_t> out;
  for (const json& in : body["instances"]) {
    out[in["id"].get<std::string>()] = in["generation"].get<std::uint64_t>();
  }
  return out;
}

// What a watch stream says about one service, checked against the protocol as it goes.
struct WatchAudit {
  std::map<std::string, std::uint64_t> view;       // id -> generation, rebuilt from events
  std::set<std::pair<std::string, std::uint64_t>>  // (id, generation) seen in a PUT or RESYNC
      delivered;
  int data_events = 0;
  int resyncs = 0;
  int out_of_order = 0;  // an event with a lower revision than the one before it
  int duplicates = 0;    // the same PUT/DELETE (revision, type, id, generation) twice
  std::uint64_t last_revision = 0;
};

WatchAudit Audit(const std::vector<json>& events, const std::string& service) {
  WatchAudit a;
  std::set<std::tuple<std::uint64_t, std::string, std::string, std::uint64_t>> seen;
  for (const json& e : events) {
    const std::string type = e.value("type", "");
    const std::uint64_t revision = e.value("revision", std::uint64_t{0});
    if (revision < a.last_revision) ++a.out_of_order;
    a.last_revision = std::max(a.last_revision, revision);
    if (type == "RESYNC") {
      ++a.resyncs;
      a.view.clear();
      for (const json& in : e["instances"]) {
        if (in["service"] != service) continue;
        const std::string id = in["id"];
        const std::uint64_t generation = in["generation"];
        a.view[id] = generation;
        a.delivered.emplace(id, generation);
      }
      continue;
    }
    if (type != "PUT" && type != "DELETE") continue;
    const json& in = e["instance"];
    if (in["service"] != service) continue;
    ++a.data_events;
    const std::string id = in["id"];
    const std::uint64_t generation = in["generation"];
    if (!seen.emplace(revision, type, id, generation).second) ++a.duplicates;
    if (type == "PUT") {
      a.view[id] = generation;
      a.delivered.emplace(id, generation);
    } else if (auto it = a.view.find(id); it != a.view.end() && it->second == generation) {
      a.view.erase(it);
    }
  }
  return a;
}

TEST(EtcdMemberKillTest, AcknowledgedWritesWatchStreamsAndExpirySurviveAnEtcdAndARegistryKill) {
  EtcdCluster etcd(3);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  std::vector<RegistryProcess> registries;
  registries.push_back(StartEtcdRegistry(etcd));
  registries.push_back(StartEtcdRegistry(etcd));
  for (const auto& r : registries) ASSERT_NE(r.http, 0) << r.line;
  // The process to kill is the expirer: its death is the one expiry has to survive.
  int victim = -1;
  ASSERT_TRUE(Eventually(
      [&] {
        for (int i = 0; i < 2; ++i) {
          if (IsExpirer(registries[i].http)) victim = i;
        }
        return victim >= 0;
      },
      15s, 50ms));
  const std::uint16_t survivor = registries[1 - victim].http;
  const std::uint16_t ports[2] = {registries[0].http, registries[1].http};

  drover::testing::WatchStream watch(survivor, "/v1/watch?from=0");
  ASSERT_TRUE(Eventually([&] { return watch.size() >= 1; }, 10s));  // the opening RESYNC

  // The instance whose expiry is measured: heartbeated through the survivor until told to stop.
  ASSERT_EQ(Http(survivor, "PUT", "/v1/services/lease/instances/lapse", Spec(1, kLeaseTtl.count()))
                .status,
            200);
  std::atomic<int> heartbeat_failures{0};
  std::atomic<Clock::rep> last_heartbeat{Clock::now().time_since_epoch().count()};
  std::jthread heartbeats([&](std::stop_token stop) {
    while (!stop.stop_requested()) {
      const auto sent = Clock::now();
      const auto r = Http(survivor, "POST", "/v1/services/lease/instances/lapse/heartbeat",
                          R"({"generation":1})");
      if (r.status == 200) {
        last_heartbeat = sent.time_since_epoch().count();
      } else {
        ++heartbeat_failures;
      }
      std::this_thread::sleep_for(250ms);
    }
  });

  // The storm: two writers, alternating between the registries. Most operations register a new
  // instance; every 4th heartbeats one already acknowledged, every 8th registers one again with
  // the next generation (a DELETE(fence) and a PUT in one revision).
  std::mutex mu;
  std::map<std::string, std::uint64_t> acked;  // guarded by mu: id -> highest acknowledged gen
  std::atomic<int> registrations{0}, reregistrations{0}, heartbeats_acked{0}, refused{0};
  std::atomic<Clock::rep> longest_wait{0};
  std::vector<std::jthread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w](std::stop_token stop) {
      std::vector<std::string> mine;
      for (int op = 0, fresh = 0; !stop.stop_requested(); ++op) {
        const std::uint16_t port = ports[(op + w) % 2];
        std::string id;
        std::uint64_t generation = 1;
        std::string target, method = "PUT", body;
        if (op % 8 == 7 && !mine.empty()) {
          id = mine[static_cast<std::size_t>(op / 8) % mine.size()];
          std::lock_guard lock(mu);
          generation = acked[id] + 1;
        } else if (op % 4 == 3 && !mine.empty()) {
          id = mine[static_cast<std::size_t>(op) % mine.size()];
          std::lock_guard lock(mu);
          generation = acked[id];
          method = "POST";
          target = "/v1/services/storm/instances/" + id + "/heartbeat";
          body = R"({"generation":)" + std::to_string(generation) + "}";
        } else {
          id = "w" + std::to_string(w) + "-" + std::to_string(fresh++);
        }
        if (method == "PUT") {
          target = "/v1/services/storm/instances/" + id;
          body = Spec(generation, 600'000);
        }
        const auto began = Clock::now();
        const auto reply = Http(port, method, target, body);
        if (reply.status != 200) {
          ++refused;
          std::this_thread::sleep_for(10ms);
          continue;
        }
        const auto took = (Clock::now() - began).count();
        if (took > longest_wait.load()) longest_wait = took;
        if (method == "POST") {
          ++heartbeats_acked;
          continue;
        }
        std::lock_guard lock(mu);
        auto [it, fresh_id] = acked.emplace(id, generation);
        if (fresh_id) {
          mine.push_back(id);
          ++registrations;
        } else {
          it->second = std::max(it->second, generation);
          ++reregistrations;
        }
      }
    });
  }
  auto acked_count = [&] {
    std::lock_guard lock(mu);
    return acked.size();
  };

  std::this_thread::sleep_for(1500ms);
  const int leader = etcd.WaitForLeader();
  ASSERT_GE(leader, 0);
  etcd.Kill(leader);
  const std::size_t acked_at_etcd_kill = acked_count();
  std::this_thread::sleep_for(500ms);
  registries[victim].child->Signal(SIGKILL);
  registries[victim].child->Wait();
  const std::size_t acked_at_registry_kill = acked_count();
  // The storm goes on through the survivor until it has been acknowledged plenty again.
  EXPECT_TRUE(Eventually([&] { return acked_count() > acked_at_registry_kill + 50; }, 20s, 20ms))
      << "writes were never acknowledged again after the kills";
  std::this_thread::sleep_for(1s);
  for (auto& w : writers) w.request_stop();
  writers.clear();  // joined
  heartbeats.request_stop();
  heartbeats.join();
  const Clock::time_point last_renewal{Clock::duration(last_heartbeat.load())};

  // Expiry: `lapse` goes (reason ttl) within its TTL plus the takeover bound.
  auto deleted_lapse = [&] {
    for (const json& e : watch.Events()) {
      if (e.value("type", "") == "DELETE" && e["instance"]["id"] == "lapse") return e;
    }
    return json();
  };
  json deletion;
  Clock::time_point expired_at{};
  const bool expired = Eventually(
      [&] {
        deletion = deleted_lapse();
        expired_at = Clock::now();
        return !deletion.is_null();
      },
      kLeaseTtl + kExpiryBound + 10s, 20ms);
  const auto lapse_after =
      std::chrono::duration_cast<std::chrono::milliseconds>(expired_at - last_renewal);

  // Acknowledged writes: on the survivor, and on a registry that loads everything from etcd.
  const std::map<std::string, std::uint64_t> acknowledged = [&] {
    std::lock_guard lock(mu);
    return acked;
  }();
  const auto on_survivor = Listed(survivor, "storm");
  ASSERT_TRUE(on_survivor.has_value());
  RegistryProcess fresh = StartEtcdRegistry(etcd);
  ASSERT_NE(fresh.http, 0) << fresh.line;
  const auto from_etcd = Listed(fresh.http, "storm");
  ASSERT_TRUE(from_etcd.has_value());
  auto lost_in = [&](const std::map<std::string, std::uint64_t>& listed) {
    int lost = 0;
    for (const auto& [id, generation] : acknowledged) {
      auto it = listed.find(id);
      if (it == listed.end() || it->second < generation) {
        ++lost;
        ADD_FAILURE() << "acknowledged " << id << " generation " << generation << " is "
                      << (it == listed.end() ? "missing" : "at an older generation");
      }
    }
    return lost;
  };
  const int lost_survivor = lost_in(*on_survivor);
  const int lost_etcd = lost_in(*from_etcd);
  EXPECT_EQ(*from_etcd, *on_survivor) << "the survivor's view differs from etcd's";

  // The watch: caught up, it must rebuild exactly the survivor's list; no acknowledged write
  // may be missing from it; revisions never go back; nothing comes twice.
  WatchAudit audit;
  EXPECT_TRUE(Eventually(
      [&] {
        audit = Audit(watch.Events(), "storm");
        return audit.view == *on_survivor;
      },
      15s, 50ms))
      << "the watcher's view never matched the registry's list: " << audit.view.size()
      << " instances against " << on_survivor->size();
  int gaps = 0;
  for (const auto& [id, generation] : acknowledged) {
    if (audit.delivered.count({id, generation}) == 0) ++gaps;
  }
  EXPECT_FALSE(watch.ended()) << "the survivor ended the watch stream";
  EXPECT_EQ(watch.malformed(), 0);

  std::printf(
      "etcd member kill: leader m%d and the expiring registry SIGKILLed mid-storm; %zu instances "
      "acknowledged (%d registrations, %d new generations; %zu before the etcd kill, %zu before "
      "the registry kill), %d heartbeats acknowledged, %d refused or unanswered; lost: %d on the "
      "survivor, %d in etcd; longest acknowledged write %lld ms\n",
      leader, acknowledged.size(), registrations.load(), reregistrations.load(), acked_at_etcd_kill,
      acked_at_registry_kill, heartbeats_acked.load(), refused.load(), lost_survivor, lost_etcd,
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::duration(longest_wait))
              .count()));
  std::printf(
      "watch on the survivor: %d data events, %d RESYNC (1 opening), watch gaps %d, duplicates "
      "%d, out of order %d; lease of 'lapse' (TTL %lld ms): expired %lld ms after its last "
      "heartbeat (%lld ms past its TTL; bound %lld ms), heartbeat failures %d\n",
      audit.data_events, audit.resyncs, gaps, audit.duplicates, audit.out_of_order,
      static_cast<long long>(kLeaseTtl.count()), static_cast<long long>(lapse_after.count()),
      static_cast<long long>((lapse_after - kLeaseTtl).count()),
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(kExpiryBound).count()),
      heartbeat_failures.load());

  EXPECT_GT(acked_at_etcd_kill, 20u) << "the storm should be well under way at the kill";
  EXPECT_EQ(lost_survivor, 0);
  EXPECT_EQ(lost_etcd, 0);
  EXPECT_EQ(gaps, 0);
  EXPECT_EQ(audit.duplicates, 0);
  EXPECT_EQ(audit.out_of_order, 0);
  EXPECT_GT(reregistrations.load(), 0);
  EXPECT_EQ(heartbeat_failures.load(), 0) << "'lapse' expired while it was heartbeated";
  ASSERT_TRUE(expired) << "'lapse' never expired after its heartbeats stopped";
  EXPECT_EQ(deletion.value("reason", ""), "ttl") << deletion.dump();
  EXPECT_GE(lapse_after, kLeaseTtl) << "expired before its TTL ran out";
  EXPECT_LE(lapse_after, kLeaseTtl + kExpiryBound);
}

}  // namespace
