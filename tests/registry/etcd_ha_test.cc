// High availability end to end (REG-5, REG-7): real etcd members and real `drover registry`
// processes on loopback. Two registries over one etcd cluster are one registry; an etcd leader
// killed mid-stream loses no acknowledged write and no watch event; the expirer role moves when
// its process dies; a feed that etcd compacted past turns into a RESYNC, never a gap.
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "drover/clock.h"
#include "registry/etcd_store.h"
#include "registry/registry.h"
#include "testing/child_process.h"
#include "testing/etcd_cluster.h"
#include "testing/eventually.h"
#include "testing/http_client.h"

namespace drover::registry {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::ChildProcess;
using testing::EtcdCluster;
using testing::Http;

struct RegistryProcess {
  std::unique_ptr<ChildProcess> child;
  std::uint16_t port = 0;
};

RegistryProcess StartRegistry(const EtcdCluster& etcd, const std::string& prefix,
                              const std::vector<std::string>& extra = {}) {
  RegistryProcess r;
  std::vector<std::string> args{DROVER_BINARY,
                                "registry",
                                "--store",
                                "etcd",
                                "--etcd-endpoints",
                                etcd.endpoints_csv(),
                                "--etcd-prefix",
                                prefix,
                                "--etcd-session-ttl",
                                "2",
                                "--http",
                                "127.0.0.1:0",
                                "--grpc",
                                "off",
                                "--tick-ms",
                                "100"};
  args.insert(args.end(), extra.begin(), extra.end());
  r.child = std::make_unique<ChildProcess>(std::move(args));
  auto line = r.child->ReadLine(20s);
  std::smatch m;
  if (line && std::regex_search(*line, m, std::regex(R"(http://127\.0\.0\.1:(\d+))"))) {
    r.port = static_cast<std::uint16_t>(std::stoi(m[1]));
  }
  return r;
}

std::string Body(int port_of_instance, std::int64_t ttl_ms) {
  return R"({"address":"127.0.0.1:)" + std::to_string(port_of_instance) +
         R"(","generation":1,"state":"READY","ttl_ms":)" + std::to_string(ttl_ms) + "}";
}

bool IsExpirer(std::uint16_t port) {
  const auto metrics = Http(port, "GET", "/metrics");
  return metrics.body.find("drover_registry_expirer 1\n") != std::string::npos;
}

std::set<std::string> Ids(std::uint16_t port, const std::string& service) {
  std::set<std::string> ids;
  const auto reply = Http(port, "GET", "/v1/services/" + service + "/instances");
  if (reply.status != 200) return ids;
  const json body = json::parse(reply.body);
  for (const auto& in : body["instances"]) ids.insert(in["id"].get<std::string>());
  return ids;
}

// The data events (PUT/DELETE) a watch stream has delivered so far, in order, as "PUT w3".
std::vector<std::string> DataEvents(testing::StreamReader& stream, std::size_t want,
                                    std::chrono::milliseconds timeout, bool* resynced = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::string> out;
  std::size_t lines = 1;
  std::uint64_t last_revision = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    out.clear();
    last_revision = 0;
    const auto all = stream.Lines(lines, 200ms);
    for (std::size_t i = 0; i < all.size(); ++i) {
      const json e = json::parse(all[i]);
      const std::string type = e["type"];
      if (type == "RESYNC" && i > 0 && resynced != nullptr) *resynced = true;
      if (type != "PUT" && type != "DELETE") continue;
      const std::uint64_t revision = e["revision"];
      EXPECT_GE(revision, last_revision) << "events out of order: " << all[i];
      last_revision = revision;
      out.push_back(type + " " + e["instance"]["id"].get<std::string>());
    }
    if (out.size() >= want) break;
    lines = all.size() + 1;
  }
  return out;
}

class EtcdHaTest : public ::testing::Test {};

TEST_F(EtcdHaTest, TwoRegistriesAreOneAndAnEtcdLeaderKillLosesNothing) {
  EtcdCluster etcd(3);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  RegistryProcess a = StartRegistry(etcd, "/ha");
  RegistryProcess b = StartRegistry(etcd, "/ha");
  ASSERT_NE(a.port, 0);
  ASSERT_NE(b.port, 0);
  testing::StreamReader watch_a(a.port, "/v1/watch?service=ha&from=0");
  testing::StreamReader watch_b(b.port, "/v1/watch?service=ha&from=0");
  ASSERT_EQ(watch_a.Lines(1, 10s).size(), 1u);  // the opening RESYNC
  ASSERT_EQ(watch_b.Lines(1, 10s).size(), 1u);

  constexpr int kWrites = 60;
  constexpr int kKillAt = 20;
  std::vector<std::string> acknowledged;
  std::chrono::steady_clock::duration longest_outage{};
  for (int i = 0; i < kWrites; ++i) {
    if (i == kKillAt) {
      const int leader = etcd.WaitForLeader();
      ASSERT_GE(leader, 0);
      etcd.Kill(leader);
    }
    // Through either registry, alternately; a write that fails is retried (a registration is
    // idempotent) until it is acknowledged.
    const std::uint16_t port = i % 2 ? b.port : a.port;
    const std::string id = "w" + std::to_string(i);
    const auto first_try = std::chrono::steady_clock::now();
    int status = 0;
    while (std::chrono::steady_clock::now() - first_try < 30s) {
      status = Http(port, "PUT", "/v1/services/ha/instances/" + id, Body(9000 + i, 600'000)).status;
      if (status == 200) break;
      std::this_thread::sleep_for(100ms);
    }
    ASSERT_EQ(status, 200) << id << " never acknowledged";
    longest_outage = std::max(longest_outage, std::chrono::steady_clock::now() - first_try);
    acknowledged.push_back("PUT " + id);
  }
  // Served again within a few seconds of the leader's death.
  EXPECT_LT(longest_outage, 10s);
  std::printf("longest wait for an acknowledged write across the etcd leader kill: %lld ms\n",
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(longest_outage).count()));

  // Every watcher of either registry saw exactly the acknowledged writes, in order, once.
  EXPECT_EQ(DataEvents(watch_a, kWrites, 20s), acknowledged);
  EXPECT_EQ(DataEvents(watch_b, kWrites, 20s), acknowledged);
  // And both registries list all of them.
  std::set<std::string> ids;
  for (int i = 0; i < kWrites; ++i) ids.insert("w" + std::to_string(i));
  EXPECT_EQ(Ids(a.port, "ha"), ids);
  EXPECT_EQ(Ids(b.port, "ha"), ids);
}

// A deploy stored through one registry is read, and continued, through the other: etcd holds it.
// Two writers of one record cannot overwrite each other unseen, one deploy per service runs at a
// time across both, and none of it moves the registry's revision (no watch event).
TEST_F(EtcdHaTest, ADeployStoredThroughOneRegistryIsSeenAndContinuedThroughTheOther) {
  EtcdCluster etcd(1);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  RegistryProcess a = StartRegistry(etcd, "/deploys");
  RegistryProcess b = StartRegistry(etcd, "/deploys");
  ASSERT_NE(a.port, 0);
  ASSERT_NE(b.port, 0);
  const auto put = [](std::uint16_t port, const std::string& id, std::uint64_t expect, bool active,
                      const std::string& note) {
    const nlohmann::json body = {{"expect_version", expect},
                                 {"active", active},
                                 {"record", {{"service", "zone"}, {"note", note}}}};
    return Http(port, "PUT", "/v1/deploys/" + id, body.dump());
  };
  const auto revision = [](std::uint16_t port) {
    return nlohmann::json::parse(Http(port, "GET", "/v1/services").body)["revision"];
  };
  // Each registry's own: one that opens after a write under the prefix that is not registry data
  // opens at that write's revision, while one already running does not move for it (its feed
  // delivers it, and nothing changed for its watchers).
  const auto revision_before_a = revision(a.port);
  const auto revision_before_b = revision(b.port);

  ASSERT_EQ(put(a.port, "zone-v2-1", 0, true, "batch 1 started").status, 200);
  const auto seen = Http(b.port, "GET", "/v1/deploys/zone-v2-1");
  ASSERT_EQ(seen.status, 200) << seen.body;
  const auto deploy = nlohmann::json::parse(seen.body);
  EXPECT_EQ(deploy["version"], 1);
  EXPECT_EQ(deploy["active"], true);
  EXPECT_EQ(deploy["record"]["note"], "batch 1 started");

  // Continued through b; a's stale write is refused and says why.
  ASSERT_EQ(put(b.port, "zone-v2-1", 1, true, "batch 2 started").status, 200);
  const auto stale = put(a.port, "zone-v2-1", 1, true, "stale");
  EXPECT_EQ(stale.status, 409);
  EXPECT_NE(stale.body.find("is at version 2, not 1"), std::string::npos) << stale.body;
  // A second deploy of zone, through either registry, is refused naming the running one.
  const auto second = put(b.port, "zone-v3-1", 0, true, "");
  EXPECT_EQ(second.status, 409);
  EXPECT_NE(second.body.find("deploy zone-v2-1 of zone is running"), std::string::npos)
      << second.body;
  ASSERT_EQ(put(a.port, "zone-v2-1", 2, false, "passed").status, 200);
  ASSERT_EQ(put(b.port, "zone-v3-1", 0, true, "").status, 200);

  const auto list = nlohmann::json::parse(Http(a.port, "GET", "/v1/deploys?service=zone").body);
  ASSERT_EQ(list["deploys"].size(), 2u);
  EXPECT_EQ(list["deploys"][0]["id"], "zone-v3-1");  // newest first
  EXPECT_EQ(list["deploys"][1]["record"]["note"], "passed");
  EXPECT_EQ(list["deploys"][1]["active"], false);
  EXPECT_EQ(revision(a.port), revision_before_a);
  EXPECT_EQ(revision(b.port), revision_before_b);
}

TEST_F(EtcdHaTest, WhenTheExpirerDiesAnotherRegistryTakesOverExpiry) {
  EtcdCluster etcd(1);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  RegistryProcess first = StartRegistry(etcd, "/exp");
  ASSERT_NE(first.port, 0);
  RegistryProcess second = StartRegistry(etcd, "/exp");
  ASSERT_NE(second.port, 0);
  ASSERT_TRUE(testing::Eventually([&] { return IsExpirer(first.port); }, 10s));
  EXPECT_FALSE(IsExpirer(second.port));

  // Both instances are registered through the process that will survive; only `kept` goes on
  // heartbeating there.
  ASSERT_EQ(Http(second.port, "PUT", "/v1/services/exp/instances/kept", Body(9001, 2'000)).status,
            200);
  ASSERT_EQ(Http(second.port, "PUT", "/v1/services/exp/instances/lapsed", Body(9002, 2'000)).status,
            200);
  std::atomic<bool> stop{false};
  std::atomic<int> heartbeat_failures{0};
  std::thread heartbeats([&] {
    while (!stop) {
      const auto r = Http(second.port, "POST", "/v1/services/exp/instances/kept/heartbeat",
                          R"({"generation":1})");
      if (r.status != 200) ++heartbeat_failures;
      std::this_thread::sleep_for(300ms);
    }
  });
  first.child->Signal(SIGKILL);
  first.child->Wait();

  // The survivor takes the role once the dead one's session lapses, and expires `lapsed` --
  // but not `kept`, whose heartbeats it received while it was not the expirer.
  EXPECT_TRUE(testing::Eventually([&] { return IsExpirer(second.port); }, 15s));
  EXPECT_TRUE(
      testing::Eventually([&] { return Ids(second.port, "exp").count("lapsed") == 0; }, 15s));
  std::this_thread::sleep_for(3s);  // longer than a TTL as the expirer
  EXPECT_EQ(Ids(second.port, "exp"), std::set<std::string>{"kept"});
  stop = true;
  heartbeats.join();
  EXPECT_EQ(heartbeat_failures.load(), 0);
}

// A client that fails over keeps heartbeating through another registry than the expirer: the
// renewals reach the expirer through etcd and the lease holds.
TEST_F(EtcdHaTest, HeartbeatsThroughTheOtherRegistryKeepTheExpirersLease) {
  EtcdCluster etcd(1);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  RegistryProcess a = StartRegistry(etcd, "/renew");
  ASSERT_NE(a.port, 0);
  ASSERT_TRUE(testing::Eventually([&] { return IsExpirer(a.port); }, 10s));
  RegistryProcess b = StartRegistry(etcd, "/renew");
  ASSERT_NE(b.port, 0);
  ASSERT_EQ(Http(a.port, "PUT", "/v1/services/renew/instances/i", Body(9001, 1'500)).status, 200);
  ASSERT_TRUE(testing::Eventually([&] { return Ids(b.port, "renew").count("i") == 1; }, 10s))
      << "B's feed delivers the registration";
  const auto until = std::chrono::steady_clock::now() + 5s;  // more than three TTLs
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_EQ(
        Http(b.port, "POST", "/v1/services/renew/instances/i/heartbeat", R"({"generation":1})")
            .status,
        200);
    std::this_thread::sleep_for(300ms);
  }
  EXPECT_EQ(Ids(a.port, "renew"), std::set<std::string>{"i"});
  const json listed = json::parse(Http(a.port, "GET", "/v1/services/renew/instances").body);
  EXPECT_GT(listed["instances"][0]["lease_remaining_ms"].get<std::int64_t>(), 500)
      << "the expirer's view of the lease follows heartbeats taken by the other registry";
}

// Self-preservation is decided by the expirer but seen through every registry of the cluster: a
// client of the other one reads `degraded` on its list, its watch and its /ready alike, and sees
// it end when the instances heartbeat again.
TEST_F(EtcdHaTest, SelfPreservationDecidedByOneRegistryIsSeenThroughTheOther) {
  EtcdCluster etcd(1);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  // Registered one after another, the four leases lapse a few milliseconds apart, and an expiry
  // tick can fall between them: at the default fraction (0.5) the first two would then expire
  // before the rest freezes. At 0.2 the first lapse alone freezes expiry.
  const std::vector<std::string> freeze_early{"--self-preservation", "0.2"};
  RegistryProcess a = StartRegistry(etcd, "/sp", freeze_early);
  ASSERT_NE(a.port, 0);
  ASSERT_TRUE(testing::Eventually([&] { return IsExpirer(a.port); }, 10s));
  RegistryProcess b = StartRegistry(etcd, "/sp", freeze_early);
  ASSERT_NE(b.port, 0);
  EXPECT_FALSE(IsExpirer(b.port));

  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(Http(a.port, "PUT", "/v1/services/sp/instances/i" + std::to_string(i),
                   Body(9000 + i, 1'500))
                  .status,
              200);
  }
  // B's feed delivers the four registrations first, so that its watch opens on all of them: a
  // watch opened earlier gets the rest as events after its RESYNC.
  ASSERT_TRUE(testing::Eventually([&] { return Ids(b.port, "sp").size() == 4; }, 10s));
  testing::StreamReader watch_b(b.port, "/v1/watch?service=sp&from=0");
  ASSERT_EQ(watch_b.Lines(1, 10s).size(), 1u);  // the opening RESYNC
  // Nobody heartbeats: all four would lapse at once, so A freezes expiry instead.
  auto degraded_on_b = [&] {
    const auto list = Http(b.port, "GET", "/v1/services/sp/instances");
    const auto ready = Http(b.port, "GET", "/ready");
    const json l = json::parse(list.body, nullptr, false);
    const json r = json::parse(ready.body, nullptr, false);
    return list.status == 200 && ready.status == 200 && l.value("degraded", false) &&
           r.value("degraded", false) && r["degraded_services"] == json::array({"sp"});
  };
  ASSERT_TRUE(testing::Eventually(degraded_on_b, 10s))
      << "B's list and /ready should say degraded: " << Http(b.port, "GET", "/ready").body;
  EXPECT_EQ(Ids(b.port, "sp").size(), 4u) << "nothing expired";
  bool watch_said_so = false;
  for (const std::string& line : watch_b.Lines(2, 5s)) {
    const json e = json::parse(line, nullptr, false);
    watch_said_so |=
        e.is_object() && e.value("type", "") == "PROGRESS" && e.value("degraded", false);
  }
  EXPECT_TRUE(watch_said_so) << "B's watchers should be told at once";

  // The instances heartbeat again (through B): A lifts self-preservation, and B says so.
  EXPECT_TRUE(testing::Eventually(
      [&] {
        for (int i = 0; i < 4; ++i) {
          (void)Http(b.port, "POST",
                     "/v1/services/sp/instances/i" + std::to_string(i) + "/heartbeat",
                     R"({"generation":1})");
        }
        const json r = json::parse(Http(b.port, "GET", "/ready").body, nullptr, false);
        return r.is_object() && r.value("degraded", true) == false;
      },
      10s, 300ms));
  EXPECT_EQ(Ids(b.port, "sp").size(), 4u);
}

TEST_F(EtcdHaTest, AFeedEtcdCompactedPastResyncsItsWatchersAndAShortCutResumesWithoutOne) {
  EtcdCluster etcd(1);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  RealClock clock;
  auto open = [&](EtcdStore** raw) {
    EtcdOptions options;
    options.endpoints = etcd.endpoints();
    options.prefix = "/compact";
    auto store = EtcdStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (raw != nullptr) *raw = store->get();
    auto registry = Registry::Open(std::move(*store), clock);
    EXPECT_TRUE(registry.ok()) << registry.status().ToString();
    return std::move(*registry);
  };
  InstanceSpec spec;
  spec.address = "127.0.0.1:9000";
  spec.generation = 1;
  spec.ttl_ms = 600'000;

  EtcdStore* feed = nullptr;
  std::unique_ptr<Registry> follower = open(&feed);
  std::unique_ptr<Registry> writer = open(nullptr);
  auto watcher = follower->Watch(follower->revision(), "svc");
  ASSERT_TRUE(watcher.ok());

  // A short cut: the feed resumes where it stopped, event by event.
  feed->PauseFeedForTesting(true);
  ASSERT_TRUE(writer->Register("svc", "a", spec).ok());
  ASSERT_TRUE(writer->Register("svc", "b", spec).ok());
  feed->PauseFeedForTesting(false);
  std::vector<Event> events;
  ASSERT_TRUE(testing::Eventually([&] {
    auto more = (*watcher)->Next(50ms);
    if (more.ok()) events.insert(events.end(), more->begin(), more->end());
    return events.size() >= 2;
  }));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, EventType::kPut);
  EXPECT_EQ(events[0].instance.id, "a");
  EXPECT_EQ(events[1].instance.id, "b");

  // A long cut: etcd compacts past the feed's revision meanwhile. The watcher gets a RESYNC
  // with everything, never a silent gap.
  feed->PauseFeedForTesting(true);
  ASSERT_TRUE(writer->Register("svc", "c", spec).ok());
  ASSERT_TRUE(writer->Deregister("svc", "a", 1).ok());
  ASSERT_TRUE(etcd.Compact(etcd.Revision()));
  feed->PauseFeedForTesting(false);
  events.clear();
  ASSERT_TRUE(testing::Eventually([&] {
    auto more = (*watcher)->Next(50ms);
    if (more.ok()) events.insert(events.end(), more->begin(), more->end());
    return !events.empty();
  }));
  ASSERT_EQ(events[0].type, EventType::kResync);
  std::set<std::string> ids;
  for (const Instance& in : events[0].snapshot) ids.insert(in.id);
  EXPECT_EQ(ids, (std::set<std::string>{"b", "c"}));
  EXPECT_EQ(follower->List("svc")->instances.size(), 2u);
  // And the feed goes on from there.
  ASSERT_TRUE(writer->Register("svc", "d", spec).ok());
  EXPECT_TRUE(testing::Eventually([&] { return follower->List("svc")->instances.size() == 3; }));
}

}  // namespace
}  // namespace drover::registry

namespace drover::registry {
namespace {

// etcd endpoints given as names follow the names: when the member a name pointed at dies and the
// name now points at another, the store resolves it again and carries on there. (The resolver is
// the test's: a name the test moves, as DNS would after a member is replaced.)
TEST_F(EtcdHaTest, EndpointNamesAreResolvedAgainWhenTheirMemberFails) {
  EtcdCluster etcd(3);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  ASSERT_GE(etcd.WaitForLeader(), 0);
  std::atomic<int> member{0};
  std::atomic<int> lookups{0};
  EtcdOptions options;
  options.endpoints = {"etcd.cluster.test:2379"};
  options.prefix = "/resolve";
  options.call_timeout = 10s;
  options.resolve = [&](const std::string& endpoint) -> Result<std::string> {
    EXPECT_EQ(endpoint, "etcd.cluster.test:2379");
    ++lookups;
    return etcd.endpoint(member.load());
  };
  auto store = EtcdStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  RealClock clock;
  auto registry = Registry::Open(std::move(*store), clock);
  ASSERT_TRUE(registry.ok()) << registry.status().ToString();
  InstanceSpec spec;
  spec.address = "127.0.0.1:9000";
  spec.generation = 1;
  spec.ttl_ms = 600'000;
  ASSERT_TRUE((*registry)->Register("svc", "before", spec).ok());
  const int before = lookups.load();

  etcd.Kill(0);
  member = 1;  // the name now points at a member that is up
  const auto written = (*registry)->Register("svc", "after", spec);
  EXPECT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_GT(lookups.load(), before) << "the name was resolved again";
  const auto list = (*registry)->List("svc");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->instances.size(), 2u);
}

}  // namespace
}  // namespace drover::registry
