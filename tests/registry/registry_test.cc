#include "registry/registry.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <set>
#include <thread>

#include "drover/mutex.h"
#include "registry/etcd_store.h"
#include "registry/forwarding_store.h"
#include "registry/gated_store.h"
#include "registry/sqlite_store.h"
#include "testing/etcd_cluster.h"
#include "testing/eventually.h"
#include "testing/temp_dir.h"

namespace drover::registry {
namespace {

using namespace std::chrono_literals;

InstanceSpec Spec(std::uint64_t generation, InstanceState state = InstanceState::kReady,
                  std::int64_t ttl_ms = 10'000) {
  InstanceSpec spec;
  spec.address = "127.0.0.1:7001";
  spec.generation = generation;
  spec.state = state;
  spec.ttl_ms = ttl_ms;
  return spec;
}

enum class StoreKind { kSqlite, kEtcd };

// One etcd member for every etcd case of this process (each case has its own key prefix).
testing::EtcdCluster& Etcd() {
  static testing::EtcdCluster cluster(1);
  return cluster;
}

// An etcd store under `prefix` in Etcd(); null (and the test failed) when it cannot be opened.
// Time is the tests' fake clock: no grace for renewals from other processes.
std::unique_ptr<Store> OpenEtcd(const std::string& prefix) {
  EtcdOptions eo;
  eo.endpoints = Etcd().endpoints();
  eo.prefix = prefix;
  eo.expiry_grace = Duration::zero();
  auto opened = EtcdStore::Open(eo);
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  if (!opened.ok()) return nullptr;
  return std::move(*opened);
}

// The registry's behaviour, run over each store: the same rules whichever holds the data.
class RegistryTest : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    if (GetParam() == StoreKind::kEtcd) {
      ASSERT_TRUE(Etcd().ok()) << Etcd().error();
      static int cases = 0;
      prefix_ = "/test/" + std::to_string(::getpid()) + "-" + std::to_string(++cases);
    }
    Reopen();
  }

  void Reopen(RegistryOptions options = {}) {
    registry_.reset();  // closes the store before it is opened again
    std::unique_ptr<Store> store;
    if (GetParam() == StoreKind::kEtcd) {
      store = OpenEtcd(prefix_);
      ASSERT_NE(store, nullptr);
    } else {
      auto opened = SqliteStore::Open(dir_.path());
      ASSERT_TRUE(opened.ok()) << opened.status().ToString();
      store = std::move(*opened);
    }
    auto registry = Registry::Open(std::move(store), clock_, options);
    ASSERT_TRUE(registry.ok()) << registry.status().ToString();
    registry_ = std::move(*registry);
    ASSERT_TRUE(registry_->expirer());
  }

  std::vector<Event> Drain(Watcher& watcher) {
    auto events = watcher.Next(0ms);
    EXPECT_TRUE(events.ok());
    return events.ok() ? *events : std::vector<Event>{};
  }

  testing::TempDir dir_;
  std::string prefix_;
  FakeClock clock_;
  std::unique_ptr<Registry> registry_;
};

INSTANTIATE_TEST_SUITE_P(Stores, RegistryTest,
                         ::testing::Values(StoreKind::kSqlite, StoreKind::kEtcd),
                         [](const ::testing::TestParamInfo<StoreKind>& param) {
                           return param.param == StoreKind::kSqlite ? "Sqlite" : "Etcd";
                         });

TEST_P(RegistryTest, RegisterListWatch) {
  auto rev = registry_->Register("zone", "z1", Spec(1));
  ASSERT_TRUE(rev.ok()) << rev.status().ToString();
  EXPECT_GT(*rev, 0u);

  auto list = registry_->List("zone");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->revision, *rev);
  EXPECT_FALSE(list->degraded);
  ASSERT_EQ(list->instances.size(), 1u);
  EXPECT_EQ(list->instances[0].id, "z1");
  EXPECT_EQ(list->instances[0].create_revision, *rev);
  EXPECT_EQ(list->instances[0].ready_since, clock_.SystemNow());

  auto watcher = registry_->Watch(0, "zone");
  ASSERT_TRUE(watcher.ok());
  auto first = Drain(**watcher);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].type, EventType::kResync);
  EXPECT_EQ(first[0].revision, *rev);
  ASSERT_EQ(first[0].snapshot.size(), 1u);

  auto rev2 = registry_->Register("zone", "z2", Spec(1));
  ASSERT_TRUE(rev2.ok());
  EXPECT_GT(*rev2, *rev);
  auto rev3 = registry_->Register("other", "o1", Spec(1));  // filtered out
  ASSERT_TRUE(rev3.ok());
  auto next = Drain(**watcher);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].type, EventType::kPut);
  EXPECT_EQ(next[0].instance.id, "z2");
  EXPECT_EQ(next[0].revision, *rev2);

  // An unknown service is an empty list at the current revision, not an error.
  auto none = registry_->List("nobody");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->instances.empty());
  EXPECT_EQ(none->revision, *rev3);
}

// The deploy calls that do not wait: made one at a time on the deploy thread in the order they
// were queued, each answered with what the waiting call returns, and every one queued answered
// before the registry is gone.
TEST_P(RegistryTest, DeployCallsQueuedAreMadeInOrderAndAnsweredBeforeTheRegistryGoes) {
  StoredDeploy d;
  d.id = "zone-v1-1";
  d.service = "zone";
  d.record = R"({"service":"zone","verdict":"running"})";
  d.active = true;
  std::vector<std::string> seen;  // appended to by the deploy thread, read once it has ended
  const auto code = [](const Status& s) { return std::string(StatusCodeName(s.code())); };
  registry_->PutDeployAsync(d, 0, [&](Result<std::uint64_t> v) {
    seen.push_back(v.ok() ? "put " + std::to_string(*v) : code(v.status()));
  });
  registry_->PutDeployAsync(d, 0, [&](Result<std::uint64_t> v) {
    seen.push_back(v.ok() ? "put again" : code(v.status()));  // version 0 is taken by now
  });
  registry_->GetDeployAsync("zone-v1-1", [&](Result<std::optional<StoredDeploy>> found) {
    seen.push_back(!found.ok() ? code(found.status())
                   : *found    ? "got " + std::to_string((*found)->version)
                               : "missing");
  });
  registry_->ListDeploysAsync("zone", 10, [&](Result<std::vector<StoredDeploy>> list) {
    seen.push_back(list.ok() ? "listed " + std::to_string(list->size()) : code(list.status()));
  });
  StoredDeploy other = d;
  other.record = R"({"service":"lobby"})";  // not the service it is filed under
  registry_->PutDeployAsync(other, 1, [&](Result<std::uint64_t> v) {
    seen.push_back(v.ok() ? "put other" : code(v.status()));
  });
  registry_.reset();
  EXPECT_EQ(seen, (std::vector<std::string>{"put 1", "ABORTED", "got 1", "listed 1",
                                            "INVALID_ARGUMENT"}));
}

TEST_P(RegistryTest, FencingRejectsLowerGenerationOnEveryWrite) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(5)).ok());
  const auto before = registry_->List("svc")->instances;
  EXPECT_EQ(registry_->Register("svc", "a", Spec(4)).status().code(), StatusCode::kAborted);
  EXPECT_EQ(registry_->Heartbeat("svc", "a", 4).status().code(), StatusCode::kAborted);
  EXPECT_EQ(
      registry_->SetState("svc", "a", 4, InstanceState::kDraining, std::nullopt).status().code(),
      StatusCode::kAborted);
  EXPECT_EQ(registry_->Deregister("svc", "a", 4).status().code(), StatusCode::kAborted);
  auto fenced = registry_->Heartbeat("svc", "a", 4);
  EXPECT_NE(fenced.status().message().find("fenced"), std::string::npos);
  EXPECT_EQ(registry_->List("svc")->instances, before);  // nothing changed
  // A newer generation that has not registered yet cannot heartbeat either.
  EXPECT_EQ(registry_->Heartbeat("svc", "a", 6).status().code(), StatusCode::kFailedPrecondition);
}

TEST_P(RegistryTest, TombstoneStopsLateRegisterAndHeartbeat) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(3)).ok());
  ASSERT_TRUE(registry_->Deregister("svc", "a", 3).ok());
  EXPECT_TRUE(registry_->List("svc")->instances.empty());
  // The old incarnation's delayed register and heartbeat must not resurrect it.
  EXPECT_EQ(registry_->Register("svc", "a", Spec(3)).status().code(), StatusCode::kAborted);
  EXPECT_EQ(registry_->Register("svc", "a", Spec(2)).status().code(), StatusCode::kAborted);
  EXPECT_EQ(registry_->Heartbeat("svc", "a", 3).status().code(), StatusCode::kAborted);
  EXPECT_TRUE(registry_->List("svc")->instances.empty());
  // Deregister again (a retry after a lost reply) is a success.
  EXPECT_TRUE(registry_->Deregister("svc", "a", 3).ok());
  // A restarted process registers a newer generation.
  EXPECT_TRUE(registry_->Register("svc", "a", Spec(4)).ok());
  EXPECT_EQ(registry_->List("svc")->instances.size(), 1u);
}

TEST_P(RegistryTest, TombstoneLastsAtLeastOneTtl) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1, InstanceState::kReady, 5'000)).ok());
  ASSERT_TRUE(registry_->Deregister("svc", "a", 1).ok())
      << registry_->Deregister("svc", "a", 1).status().ToString();
  clock_.Advance(4'999ms);
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_EQ(registry_->Register("svc", "a", Spec(1)).status().code(), StatusCode::kAborted);
  clock_.Advance(1ms);
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_TRUE(registry_->Register("svc", "a", Spec(1)).ok());
}

// Pruning looks at the tombstones only once one may be due; one left after such a look, due
// earlier than every other, still goes on time.
TEST_P(RegistryTest, ATombstoneLeftAfterAPruningLookStillGoesOnTime) {
  ASSERT_TRUE(registry_->Register("svc", "long", Spec(1, InstanceState::kReady, 60'000)).ok());
  ASSERT_TRUE(registry_->Deregister("svc", "long", 1).ok());
  clock_.Advance(1s);
  ASSERT_TRUE(registry_->Tick().ok());  // nothing due before ~60 s from here
  ASSERT_TRUE(registry_->Register("svc", "short", Spec(1, InstanceState::kReady, 2'000)).ok());
  ASSERT_TRUE(registry_->Deregister("svc", "short", 1).ok());
  clock_.Advance(1'999ms);
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_EQ(registry_->Register("svc", "short", Spec(1)).status().code(), StatusCode::kAborted);
  clock_.Advance(1ms);
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_TRUE(registry_->Register("svc", "short", Spec(1)).ok());
  EXPECT_EQ(registry_->Register("svc", "long", Spec(1)).status().code(), StatusCode::kAborted);
}

// The summaries count READY instances and their versions as instances come, change and go;
// after every step they say what the lists say.
TEST_P(RegistryTest, ServiceSummariesCountWhatTheListsHold) {
  const auto expect_matching_lists = [&](const std::string& step) {
    for (const ServiceSummary& s : registry_->Services()) {
      auto list = registry_->List(s.name);
      ASSERT_TRUE(list.ok()) << step;
      std::size_t ready = 0;
      std::map<std::string, std::size_t> versions;
      for (const Instance& in : list->instances) {
        if (in.spec.state != InstanceState::kReady) continue;
        ++ready;
        ++versions[in.spec.version];
      }
      EXPECT_EQ(s.instances, list->instances.size()) << step << ": " << s.name;
      EXPECT_EQ(s.ready, ready) << step << ": " << s.name;
      EXPECT_EQ(s.ready_versions, versions) << step << ": " << s.name;
    }
  };
  const auto spec = [](std::uint64_t generation, InstanceState state, std::string version) {
    InstanceSpec sp = Spec(generation, state);
    sp.version = std::move(version);
    return sp;
  };
  ASSERT_TRUE(registry_->Register("zone", "a", spec(1, InstanceState::kReady, "v1")).ok());
  ASSERT_TRUE(registry_->Register("zone", "b", spec(1, InstanceState::kReady, "v1")).ok());
  ASSERT_TRUE(registry_->Register("zone", "c", spec(1, InstanceState::kStarting, "v2")).ok());
  ASSERT_TRUE(registry_->Register("chat", "x", spec(1, InstanceState::kReady, "")).ok());
  expect_matching_lists("registered");
  ASSERT_EQ(registry_->Services()[1].ready_versions,
            (std::map<std::string, std::size_t>{{"v1", 2}}));
  ASSERT_TRUE(registry_->SetState("zone", "c", 1, InstanceState::kReady, std::nullopt).ok());
  expect_matching_lists("c ready");
  ASSERT_TRUE(registry_->Register("zone", "a", spec(1, InstanceState::kReady, "v2")).ok());
  expect_matching_lists("a re-registered with v2");
  ASSERT_TRUE(registry_->Register("zone", "b", spec(2, InstanceState::kStarting, "v2")).ok());
  expect_matching_lists("b replaced by a new incarnation");
  ASSERT_TRUE(registry_->SetState("zone", "a", 1, InstanceState::kDraining, std::nullopt).ok());
  expect_matching_lists("a draining");
  ASSERT_TRUE(registry_->Deregister("zone", "c", 1).ok());
  expect_matching_lists("c deregistered");
  EXPECT_EQ(registry_->Services()[1].ready, 0u);
  EXPECT_TRUE(registry_->Services()[1].ready_versions.empty());
  Reopen();
  expect_matching_lists("after a restart");
  ASSERT_EQ(registry_->Services()[0].ready_versions, (std::map<std::string, std::size_t>{{"", 1}}));
  ASSERT_TRUE(registry_->Register("chat", "y", spec(1, InstanceState::kReady, "v3")).ok());
  clock_.Advance(5s);
  ASSERT_TRUE(registry_->Heartbeat("chat", "y", 1).ok());
  clock_.Advance(6s);  // x lapses alone (one of two: no self-preservation); zone's two as well
  ASSERT_TRUE(registry_->Tick().ok());
  expect_matching_lists("expired");
  ASSERT_EQ(registry_->Services().size(), 1u);
  EXPECT_EQ(registry_->Services()[0].ready_versions,
            (std::map<std::string, std::size_t>{{"v3", 1}}));
}

TEST_P(RegistryTest, DrainIsStickyAgainstHeartbeatsAndReRegister) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1)).ok());
  ASSERT_TRUE(registry_->SetState("svc", "a", 1, InstanceState::kDraining, std::nullopt).ok());
  ASSERT_TRUE(registry_->Heartbeat("svc", "a", 1).ok());
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1, InstanceState::kReady)).ok());
  auto list = registry_->List("svc");
  ASSERT_EQ(list->instances.size(), 1u);
  EXPECT_EQ(list->instances[0].spec.state, InstanceState::kDraining);
  EXPECT_EQ(list->instances[0].ready_since, SystemTime{});

  auto watcher = registry_->Watch(registry_->revision(), "svc");
  ASSERT_TRUE(registry_->Deregister("svc", "a", 1).ok())
      << registry_->Deregister("svc", "a", 1).status().ToString();
  auto events = Drain(**watcher);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, EventType::kDelete);
  EXPECT_EQ(events[0].reason, RemovalReason::kDrain);
}

TEST_P(RegistryTest, SetStateCannotUndoADrain) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1)).ok());
  ASSERT_TRUE(registry_->SetState("svc", "a", 1, InstanceState::kDraining, std::nullopt).ok());
  EXPECT_EQ(registry_->SetState("svc", "a", 1, InstanceState::kReady, std::nullopt).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      registry_->SetState("svc", "a", 1, InstanceState::kStarting, std::nullopt).status().code(),
      StatusCode::kFailedPrecondition);
  EXPECT_TRUE(registry_->SetState("svc", "a", 1, std::nullopt, false).ok());
  EXPECT_EQ(registry_->List("svc")->instances[0].spec.state, InstanceState::kDraining);
  // A new incarnation starts afresh.
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(2, InstanceState::kReady)).ok());
  EXPECT_EQ(registry_->List("svc")->instances[0].spec.state, InstanceState::kReady);
}

TEST_P(RegistryTest, RefusedWriteDoesNotRenewTheLease) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1, InstanceState::kReady, 10'000)).ok());
  ASSERT_TRUE(registry_->SetState("svc", "a", 1, InstanceState::kDraining, std::nullopt).ok());
  clock_.Advance(9s);
  EXPECT_FALSE(registry_->SetState("svc", "a", 1, InstanceState::kReady, std::nullopt).ok());
  clock_.Advance(1s);
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_TRUE(registry_->List("svc")->instances.empty());
  EXPECT_TRUE(registry_->Services().empty());  // an empty service is forgotten
}

TEST_P(RegistryTest, AcceptingIsSeparateFromReadiness) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1)).ok());
  const SystemTime ready = registry_->List("svc")->instances[0].ready_since;
  clock_.Advance(1s);
  ASSERT_TRUE(registry_->SetState("svc", "a", 1, std::nullopt, false).ok());
  auto in = registry_->List("svc")->instances[0];
  EXPECT_FALSE(in.spec.accepting);
  EXPECT_EQ(in.spec.state, InstanceState::kReady);
  EXPECT_EQ(in.ready_since, ready);  // still READY since then
}

TEST_P(RegistryTest, NewGenerationReplacesOldWithFenceEvent) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1)).ok());
  auto watcher = registry_->Watch(registry_->revision(), "");
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(2, InstanceState::kStarting)).ok());
  auto events = Drain(**watcher);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, EventType::kDelete);
  EXPECT_EQ(events[0].reason, RemovalReason::kFence);
  EXPECT_EQ(events[0].instance.spec.generation, 1u);
  EXPECT_EQ(events[1].type, EventType::kPut);
  EXPECT_EQ(events[1].instance.spec.generation, 2u);
  EXPECT_EQ(events[1].instance.create_revision, events[1].revision);
}

TEST_P(RegistryTest, LeasesExpireOnFakeClockWithReason) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1, InstanceState::kReady, 10'000)).ok());
  ASSERT_TRUE(registry_->Register("svc", "b", Spec(1, InstanceState::kReady, 10'000)).ok());
  ASSERT_TRUE(registry_->Register("svc", "c", Spec(1, InstanceState::kReady, 10'000)).ok());
  auto watcher = registry_->Watch(registry_->revision(), "svc");
  // Hours of heartbeats in no time: b and c keep theirs, a stops after the first minute.
  for (int minute = 0; minute < 180; ++minute) {
    for (int s = 0; s < 60; s += 5) {
      clock_.Advance(5s);
      if (minute == 0) {
        ASSERT_TRUE(registry_->Heartbeat("svc", "a", 1).ok());
      }
      ASSERT_TRUE(registry_->Heartbeat("svc", "b", 1).ok());
      ASSERT_TRUE(registry_->Heartbeat("svc", "c", 1).ok());
      ASSERT_TRUE(registry_->Tick().ok());
    }
  }
  auto list = registry_->List("svc");
  ASSERT_EQ(list->instances.size(), 2u);
  EXPECT_FALSE(list->degraded);
  std::vector<Event> deletes;
  for (auto& e : Drain(**watcher)) {
    if (e.type == EventType::kDelete) deletes.push_back(e);
  }
  ASSERT_EQ(deletes.size(), 1u);
  EXPECT_EQ(deletes[0].instance.id, "a");
  EXPECT_EQ(deletes[0].reason, RemovalReason::kTtl);
  // Hours later even its tombstone has gone: the id is simply unknown.
  EXPECT_EQ(registry_->Heartbeat("svc", "a", 1).status().code(), StatusCode::kNotFound);
}

// Expiry looks at a service's instances only once one may have lapsed; a lease made shorter
// after such a look (a re-registration with a smaller TTL, a new instance with a short one) must
// still end on time, and one renewed meanwhile must not.
TEST_P(RegistryTest, LeasesShortenedOrAddedAfterATickStillLapseOnTime) {
  RegistryOptions options;
  options.self_preservation_min_instances = 100;  // two of three expire here, one by one
  Reopen(options);
  ASSERT_TRUE(registry_->Register("svc", "long", Spec(1, InstanceState::kReady, 60'000)).ok());
  ASSERT_TRUE(registry_->Register("svc", "shrinks", Spec(1, InstanceState::kReady, 60'000)).ok());
  clock_.Advance(1s);
  ASSERT_TRUE(registry_->Tick().ok());  // nothing lapses before ~60 s from here
  ASSERT_TRUE(registry_->Register("svc", "shrinks", Spec(1, InstanceState::kReady, 2'000)).ok());
  ASSERT_TRUE(registry_->Register("svc", "short", Spec(1, InstanceState::kReady, 3'000)).ok());
  clock_.Advance(2500ms);
  ASSERT_TRUE(registry_->Tick().ok());
  auto list = registry_->List("svc");
  ASSERT_EQ(list->instances.size(), 2u);
  EXPECT_EQ(list->instances[0].id, "long");
  EXPECT_EQ(list->instances[1].id, "short");
  ASSERT_TRUE(registry_->Heartbeat("svc", "short", 1).ok());  // now lasts until +3 s
  clock_.Advance(1s);
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_EQ(registry_->List("svc")->instances.size(), 2u);
  clock_.Advance(2s);
  ASSERT_TRUE(registry_->Tick().ok());
  list = registry_->List("svc");
  ASSERT_EQ(list->instances.size(), 1u);
  EXPECT_EQ(list->instances[0].id, "long");
  clock_.Advance(60s);
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_TRUE(registry_->List("svc")->instances.empty());
}

TEST_P(RegistryTest, HeartbeatAllAnswersEachRenewalAsHeartbeatWould) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(2, InstanceState::kReady, 10'000)).ok());
  ASSERT_TRUE(registry_->Register("svc", "b", Spec(1, InstanceState::kReady, 10'000)).ok());
  clock_.Advance(9s);
  std::vector<Status> results;
  const std::uint64_t rev = registry_->HeartbeatAll(
      {{"svc", "a", 2}, {"svc", "a", 1}, {"svc", "nobody", 1}, {"bad name", "x", 1}}, results);
  EXPECT_EQ(rev, registry_->revision());
  ASSERT_EQ(results.size(), 4u);
  EXPECT_TRUE(results[0].ok());
  EXPECT_EQ(results[1].code(), StatusCode::kAborted);  // fenced
  EXPECT_EQ(results[2].code(), StatusCode::kNotFound);
  EXPECT_EQ(results[3].code(), StatusCode::kInvalidArgument);
  clock_.Advance(2s);  // b was not renewed and lapses; a was
  ASSERT_TRUE(registry_->Tick().ok());
  auto list = registry_->List("svc");
  ASSERT_EQ(list->instances.size(), 1u);
  EXPECT_EQ(list->instances[0].id, "a");
}

TEST_P(RegistryTest, ExpiryLeavesATombstone) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1, InstanceState::kReady, 10'000)).ok());
  clock_.Advance(10s);
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_TRUE(registry_->List("svc")->instances.empty());
  // A heartbeat that arrives just too late cannot bring the expired incarnation back.
  EXPECT_EQ(registry_->Heartbeat("svc", "a", 1).status().code(), StatusCode::kAborted);
  EXPECT_EQ(registry_->Register("svc", "a", Spec(1)).status().code(), StatusCode::kAborted);
  EXPECT_TRUE(registry_->Register("svc", "a", Spec(2)).ok());
}

TEST_P(RegistryTest, SelfPreservationFreezesMassExpiry) {
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(registry_->Register("svc", "i" + std::to_string(i), Spec(1)).ok());
  }
  // A network partition: nobody heartbeats.
  clock_.Advance(11s);
  ASSERT_TRUE(registry_->Tick().ok());
  auto list = registry_->List("svc");
  EXPECT_EQ(list->instances.size(), 10u);
  EXPECT_TRUE(list->degraded);
  EXPECT_TRUE(registry_->Services()[0].degraded);
  auto watcher = registry_->Watch(0, "svc");
  auto resync = Drain(**watcher);
  ASSERT_EQ(resync.size(), 1u);
  EXPECT_TRUE(resync[0].degraded);

  // The partition heals: heartbeats resume, the flag clears, nothing was lost.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(registry_->Heartbeat("svc", "i" + std::to_string(i), 1).ok());
  }
  ASSERT_TRUE(registry_->Tick().ok());
  list = registry_->List("svc");
  EXPECT_EQ(list->instances.size(), 10u);
  EXPECT_FALSE(list->degraded);

  // A few real deaths still expire normally.
  clock_.Advance(5s);
  for (int i = 2; i < 10; ++i) {
    ASSERT_TRUE(registry_->Heartbeat("svc", "i" + std::to_string(i), 1).ok());
  }
  clock_.Advance(6s);
  ASSERT_TRUE(registry_->Tick().ok());
  list = registry_->List("svc");
  EXPECT_EQ(list->instances.size(), 8u);
  EXPECT_FALSE(list->degraded);
}

TEST_P(RegistryTest, WatcherResumesFromOldRevisionWithoutGaps) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1)).ok());
  const std::uint64_t resume_from = registry_->revision();
  std::vector<std::uint64_t> revs;
  revs.push_back(registry_->Register("svc", "b", Spec(1)).value());
  revs.push_back(
      registry_->SetState("svc", "a", 1, InstanceState::kDraining, std::nullopt).value());
  revs.push_back(registry_->Deregister("svc", "b", 1).value());
  auto watcher = registry_->Watch(resume_from, "svc");
  ASSERT_TRUE(watcher.ok());
  auto events = Drain(**watcher);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].revision, revs[0]);
  EXPECT_EQ(events[1].revision, revs[1]);
  EXPECT_EQ(events[2].revision, revs[2]);
  EXPECT_EQ(events[2].type, EventType::kDelete);
  EXPECT_EQ(registry_->Watch(registry_->revision() + 1, "").status().code(),
            StatusCode::kOutOfRange);
}

TEST_P(RegistryTest, ResyncWhenHistoryIsGone) {
  RegistryOptions options;
  options.history = 4;
  Reopen(options);
  std::vector<std::uint64_t> revs;
  for (int i = 0; i < 10; ++i) {
    revs.push_back(registry_->Register("svc", "i" + std::to_string(i), Spec(1)).value());
  }
  auto watcher = registry_->Watch(revs[1], "svc");
  auto events = Drain(**watcher);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, EventType::kResync);
  EXPECT_EQ(events[0].revision, revs[9]);
  EXPECT_EQ(events[0].snapshot.size(), 10u);
  // Recent enough: replayed event by event.
  auto recent = registry_->Watch(revs[6], "svc");
  EXPECT_EQ(Drain(**recent).size(), 3u);
}

TEST_P(RegistryTest, HistoryIsBoundedByBytesToo) {
  // Instances with large labels: the byte bound, not the count, decides what is kept.
  RegistryOptions options;
  options.history_bytes = 20'000;
  Reopen(options);
  std::vector<std::uint64_t> revs;
  for (int i = 0; i < 10; ++i) {
    InstanceSpec spec = Spec(1);
    for (int l = 0; l < 12; ++l) spec.labels["l" + std::to_string(l)] = std::string(250, 'x');
    revs.push_back(registry_->Register("svc", "i" + std::to_string(i), spec).value());
  }
  // About four of the ten events (~4 KB each) fit: resuming from the start is a RESYNC of all.
  auto old = registry_->Watch(revs[0], "svc");
  auto events = Drain(**old);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, EventType::kResync);
  EXPECT_EQ(events[0].snapshot.size(), 10u);
  // The newest are still replayed one by one.
  auto recent = registry_->Watch(revs[7], "svc");
  auto replayed = Drain(**recent);
  ASSERT_EQ(replayed.size(), 2u);
  EXPECT_EQ(replayed[0].type, EventType::kPut);
  EXPECT_EQ(replayed[1].revision, revs[9]);
}

TEST_P(RegistryTest, SlowWatcherGetsResyncInsteadOfAGap) {
  RegistryOptions options;
  options.watcher_queue_limit = 3;
  Reopen(options);
  auto watcher = registry_->Watch(registry_->revision(), "");
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(registry_->Register("svc", "i" + std::to_string(i), Spec(1)).ok());
  }
  auto events = Drain(**watcher);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].type, EventType::kResync);
  std::uint64_t last = events[0].revision;
  std::size_t known = events[0].snapshot.size();
  for (std::size_t i = 1; i < events.size(); ++i) {
    EXPECT_GT(events[i].revision, last);
    last = events[i].revision;
    ++known;
  }
  EXPECT_EQ(last, registry_->revision());
  EXPECT_EQ(known, 5u);
}

TEST_P(RegistryTest, OverflowNeverDuplicatesOrReordersEvents) {
  RegistryOptions options;
  options.watcher_queue_limit = 2;
  options.history = 100;
  Reopen(options);
  std::vector<std::uint64_t> revs;
  for (int i = 0; i < 6; ++i) {
    revs.push_back(
        registry_->Register("svc", "i" + std::to_string(i), Spec(1, InstanceState::kReady, 10'000))
            .value());
  }
  // A replay longer than the queue starts with a RESYNC instead of overflowing mid-way.
  auto replay = registry_->Watch(revs[0], "svc");
  auto replayed = Drain(**replay);
  ASSERT_EQ(replayed.size(), 1u);
  EXPECT_EQ(replayed[0].type, EventType::kResync);
  EXPECT_EQ(replayed[0].revision, revs[5]);

  // One revision with six DELETEs overflows a two-event queue part way through: the watcher
  // gets one RESYNC and none of that revision's DELETEs after it. (Self-preservation off, so
  // all six really expire.)
  RegistryOptions no_freeze = options;
  no_freeze.self_preservation_fraction = 1.0;
  Reopen(no_freeze);
  auto watcher = registry_->Watch(registry_->revision(), "svc");
  clock_.Advance(11s);
  ASSERT_TRUE(registry_->Tick().ok());
  auto events = Drain(**watcher);
  ASSERT_FALSE(events.empty());
  std::uint64_t last = 0;
  for (const Event& e : events) {
    EXPECT_GE(e.revision, last);
    if (e.type == EventType::kResync) last = e.revision + 1;  // nothing at or below it follows
    if (e.type == EventType::kPut || e.type == EventType::kDelete) {
      EXPECT_GE(e.revision, last) << "an event already contained in the RESYNC";
    }
  }
  EXPECT_EQ(events.front().type, EventType::kResync);
  EXPECT_TRUE(events.front().snapshot.empty());
}

TEST_P(RegistryTest, DegradedChangeIsAnnouncedAtOnce) {
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(registry_->Register("svc", "i" + std::to_string(i), Spec(1)).ok());
  }
  auto watcher = registry_->Watch(registry_->revision(), "");
  clock_.Advance(11s);
  ASSERT_TRUE(registry_->Tick().ok());
  auto events = Drain(**watcher);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, EventType::kProgress);
  EXPECT_TRUE(events[0].degraded);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(registry_->Heartbeat("svc", "i" + std::to_string(i), 1).ok());
  }
  ASSERT_TRUE(registry_->Tick().ok());
  events = Drain(**watcher);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_FALSE(events[0].degraded);
}

TEST_P(RegistryTest, ProgressEventsOnIdleWatchers) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1)).ok());
  auto watcher = registry_->Watch(registry_->revision(), "svc");
  clock_.Advance(4s);
  ASSERT_TRUE(registry_->Heartbeat("svc", "a", 1).ok());
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_TRUE(Drain(**watcher).empty());
  clock_.Advance(1s);
  ASSERT_TRUE(registry_->Tick().ok());
  auto events = Drain(**watcher);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, EventType::kProgress);
  EXPECT_EQ(events[0].revision, registry_->revision());
}

TEST_P(RegistryTest, CancelledWatcherReportsCancelled) {
  auto watcher = registry_->Watch(0, "");
  (*watcher)->Cancel();
  EXPECT_EQ((*watcher)->Next(10ms).status().code(), StatusCode::kCancelled);
}

TEST_P(RegistryTest, RestartKeepsRegistrationsAndGrantsFreshLeases) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(7, InstanceState::kReady, 10'000)).ok());
  ASSERT_TRUE(registry_->SetState("svc", "a", 7, InstanceState::kDraining, std::nullopt).ok());
  ASSERT_TRUE(registry_->Register("svc", "b", Spec(1)).ok());
  ASSERT_TRUE(registry_->Deregister("svc", "b", 1).ok());
  const std::uint64_t revision = registry_->revision();
  clock_.Advance(9s);  // a's lease almost lapsed when the registry goes down
  Reopen();
  // Nothing is lost (a shared store's revision may also have moved for its own bookkeeping).
  EXPECT_GE(registry_->revision(), revision);
  auto list = registry_->List("svc");
  ASSERT_EQ(list->instances.size(), 1u);
  EXPECT_EQ(list->instances[0].spec.generation, 7u);
  EXPECT_EQ(list->instances[0].spec.state, InstanceState::kDraining);
  // The tombstone survived the restart.
  EXPECT_EQ(registry_->Register("svc", "b", Spec(1)).status().code(), StatusCode::kAborted);
  // Fresh lease: the old deadline has passed, the new one has not.
  clock_.Advance(2s);
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_EQ(registry_->List("svc")->instances.size(), 1u);
  clock_.Advance(9s);
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_TRUE(registry_->List("svc")->instances.empty());
  // Events from before the restart are not retained: resuming from them is a RESYNC.
  auto watcher = registry_->Watch(1, "svc");
  EXPECT_EQ(Drain(**watcher)[0].type, EventType::kResync);
}

TEST_P(RegistryTest, InvalidWritesChangeNothing) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1)).ok());
  const std::uint64_t revision = registry_->revision();
  InstanceSpec bad_port = Spec(2);
  bad_port.address = "127.0.0.1:99999";
  EXPECT_EQ(registry_->Register("svc", "a", bad_port).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_->Register("bad service", "a", Spec(1)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_->Heartbeat("svc", std::string(500, 'x'), 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_->List("../etc").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_->revision(), revision);
  EXPECT_EQ(registry_->List("svc")->instances[0].spec.generation, 1u);
}

// Concurrent writers, on either store: every write answered once, each at a revision of its own,
// nothing lost from the view or from a watcher's stream.
TEST_P(RegistryTest, ConcurrentWritesAreEachWatchedOnceInRevisionOrder) {
  auto watcher = registry_->Watch(registry_->revision(), "svc");
  ASSERT_TRUE(watcher.ok());
  constexpr int kThreads = 8;
  constexpr int kEach = 25;
  Mutex mu;
  std::vector<std::uint64_t> revisions;
  std::vector<std::string> failures;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) {
          const std::string id = "t" + std::to_string(t) + "-" + std::to_string(i);
          // Two writes to one instance back to back, and one instance every thread writes.
          auto reg = registry_->Register("svc", id, Spec(1));
          auto drain = registry_->SetState("svc", id, 1, InstanceState::kDraining, std::nullopt);
          auto shared = registry_->Register("svc", "shared",
                                            Spec(1 + static_cast<std::uint64_t>(t * kEach + i)));
          MutexLock lock(mu);
          for (const auto* r : {&reg, &drain}) {
            if (r->ok()) revisions.push_back(r->value());
            if (!r->ok()) failures.push_back(id + ": " + r->status().ToString());
          }
          // A lower generation than one already registered there is fenced: never an error
          // of any other kind.
          if (!shared.ok() && shared.status().code() != StatusCode::kAborted) {
            failures.push_back("shared: " + shared.status().ToString());
          }
          if (shared.ok()) revisions.push_back(shared.value());
        }
      });
    }
  }
  EXPECT_TRUE(failures.empty()) << failures.front();
  std::sort(revisions.begin(), revisions.end());
  if (GetParam() == StoreKind::kSqlite) {
    const std::set<std::uint64_t> distinct(revisions.begin(), revisions.end());
    EXPECT_EQ(distinct.size(), revisions.size()) << "two writes answered with one revision";
  }  // (on etcd a group of writes commits at one revision)
  auto list = registry_->List("svc");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->instances.size(), static_cast<std::size_t>(kThreads * kEach + 1));
  for (const Instance& in : list->instances) {
    if (in.id == "shared") continue;
    EXPECT_EQ(in.spec.state, InstanceState::kDraining) << in.id;
  }
  // The watcher saw every committed write once, in revision order.
  std::vector<std::uint64_t> seen;
  for (int tries = 0; seen.size() < revisions.size() && tries < 100; ++tries) {
    auto events = (*watcher)->Next(100ms);
    ASSERT_TRUE(events.ok());
    for (const Event& e : *events) {
      if (e.type == EventType::kPut) seen.push_back(e.revision);
    }
  }
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(seen, revisions);
}

// The etcd store commits a group in one Txn, each set a nested Txn with its own compares: the sets
// whose compares hold are written at that Txn's one revision, a set whose compare fails is
// refused alone, and the feed reports the written ones as one change.
class ChangeLog final : public StoreListener {
 public:
  void OnChange(const Change& change) override {
    MutexLock lock(mu_);
    changes_.push_back(change);
  }
  void OnReset(StoreState) override {}
  void OnRenewals(const std::vector<LeaseRenewal>&) override {}
  void OnFeedRestored() override {}
  void OnDegraded(const std::vector<std::string>&) override {}
  std::vector<Change> changes() {
    MutexLock lock(mu_);
    return changes_;
  }

 private:
  Mutex mu_;
  std::vector<Change> changes_ DROVER_GUARDED_BY(mu_);
};

Write PutWrite(const std::string& id, std::optional<std::uint64_t> expect) {
  Write w;
  w.kind = Write::Kind::kPutInstance;
  w.service = "svc";
  w.id = id;
  w.instance.service = "svc";
  w.instance.id = id;
  w.instance.spec = Spec(1);
  w.create = expect == 0u;
  w.expect_mod_revision = expect;
  return w;
}

TEST(EtcdStoreBatchTest, AGroupIsOneRevisionAndALostCompareRefusesOnlyItsOwnSet) {
  ASSERT_TRUE(Etcd().ok()) << Etcd().error();
  ChangeLog log;  // outlives the store
  EtcdOptions eo;
  eo.endpoints = Etcd().endpoints();
  eo.prefix = "/test/" + std::to_string(::getpid()) + "-batch";
  auto opened = EtcdStore::Open(eo);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EtcdStore& store = **opened;
  auto loaded = store.Load();
  ASSERT_TRUE(loaded.ok());
  ASSERT_TRUE(store.Follow(loaded->revision, &log).ok());
  auto first = store.Commit({PutWrite("a", 0)});
  ASSERT_TRUE(first.ok()) << first.status().ToString();

  // b and c are new; a is written as if it were still absent (a lost race).
  auto batch = store.CommitBatch({{PutWrite("b", 0)}, {PutWrite("a", 0)}, {PutWrite("c", 0)}});
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->size(), 3u);
  ASSERT_TRUE((*batch)[0].ok()) << (*batch)[0].status().ToString();
  EXPECT_EQ((*batch)[1].status().code(), StatusCode::kAborted);
  ASSERT_TRUE((*batch)[2].ok());
  EXPECT_EQ((*batch)[0].value(), (*batch)[2].value());
  // Each Txn is the next revision (nothing else writes to this etcd): consecutive_revisions().
  EXPECT_EQ((*batch)[0].value(), *first + 1);
  EXPECT_TRUE(store.consecutive_revisions());

  ASSERT_TRUE(store.WaitDelivered((*batch)[0].value(), 5s).ok());
  const std::vector<Change> changes = log.changes();
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[1].revision, (*batch)[0].value());
  std::vector<std::string> ids;
  for (const Write& w : changes[1].writes) {
    ids.push_back(w.id);
    EXPECT_TRUE(w.create) << w.id;  // created by this change
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"b", "c"}));

  // More sets than one Txn may hold: split, every one written.
  std::vector<std::vector<Write>> many;
  for (std::size_t i = 0; i < EtcdStore::kMaxSetsPerTxn + 3; ++i) {
    many.push_back({PutWrite("m" + std::to_string(i), 0)});
  }
  auto split = store.CommitBatch(many);
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  ASSERT_EQ(split->size(), many.size());
  for (const auto& r : *split) EXPECT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_LT(split->front().value(), split->back().value());
  auto state = store.Load();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->instances.size(), 3 + many.size());
}

// A listener that holds every change up to a revision already (as a registry holds its own
// commits): the feed skips those revisions' instances, yet still brings another process's lease
// renewals and self-preservation report, whatever their revision.
class HoldingLog final : public StoreListener {
 public:
  void HoldThrough(std::uint64_t revision) {
    MutexLock lock(mu_);
    held_ = revision;
  }
  bool Holds(std::uint64_t revision) override {
    MutexLock lock(mu_);
    return revision <= held_;
  }
  void OnChange(const Change& change) override {
    MutexLock lock(mu_);
    changes_.push_back(change.revision);
  }
  void OnReset(StoreState) override {}
  void OnRenewals(const std::vector<LeaseRenewal>& renewals) override {
    MutexLock lock(mu_);
    for (const LeaseRenewal& r : renewals) renewed_.push_back(r.id);
  }
  void OnFeedRestored() override {}
  void OnDegraded(const std::vector<std::string>& services) override {
    MutexLock lock(mu_);
    degraded_ = services;
  }
  std::vector<std::uint64_t> changes() {
    MutexLock lock(mu_);
    return changes_;
  }
  std::vector<std::string> renewed() {
    MutexLock lock(mu_);
    return renewed_;
  }
  std::vector<std::string> degraded() {
    MutexLock lock(mu_);
    return degraded_;
  }

 private:
  Mutex mu_;
  std::uint64_t held_ DROVER_GUARDED_BY(mu_) = 0;
  std::vector<std::uint64_t> changes_ DROVER_GUARDED_BY(mu_);
  std::vector<std::string> renewed_ DROVER_GUARDED_BY(mu_);
  std::vector<std::string> degraded_ DROVER_GUARDED_BY(mu_);
};

TEST(EtcdStoreBatchTest, TheFeedSkipsWhatItsListenerHoldsButNotOtherProcessesReports) {
  ASSERT_TRUE(Etcd().ok()) << Etcd().error();
  HoldingLog log;  // outlives the stores
  const std::string prefix = "/test/" + std::to_string(::getpid()) + "-held";
  const std::unique_ptr<Store> opened = OpenEtcd(prefix);
  ASSERT_NE(opened, nullptr);
  Store& store = *opened;
  const std::unique_ptr<Store> other = OpenEtcd(prefix);  // another process's name
  ASSERT_NE(other, nullptr);
  auto loaded = store.Load();
  ASSERT_TRUE(loaded.ok());
  log.HoldThrough(std::numeric_limits<std::uint64_t>::max());
  ASSERT_TRUE(store.Follow(loaded->revision, &log).ok());

  auto held = store.Commit({PutWrite("a", 0)});
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_TRUE(store.WaitDelivered(*held, 5s).ok());
  // Written by the other process, at revisions the listener says it holds: delivered.
  other->ShareRenewals({LeaseRenewal{"svc", "a", 1}});
  ASSERT_TRUE(other->ShareDegraded({"svc"}).ok());
  EXPECT_TRUE(testing::Eventually([&] { return log.renewed() == std::vector<std::string>{"a"}; }));
  EXPECT_TRUE(
      testing::Eventually([&] { return log.degraded() == std::vector<std::string>{"svc"}; }));

  auto head = store.Head();
  ASSERT_TRUE(head.ok());
  log.HoldThrough(*head);
  auto next = store.Commit({PutWrite("b", 0)});
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  ASSERT_TRUE(store.WaitDelivered(*next, 5s).ok());
  EXPECT_EQ(log.changes(), std::vector<std::uint64_t>{*next});
}

// An etcd store whose feed holds every change it brings (OnChange) until the test lets them go:
// what a registry does while its feed is slow or broken.
class HeldFeedStore final : public ForwardingStore, public StoreListener {
 public:
  using ForwardingStore::ForwardingStore;
  ~HeldFeedStore() override {
    {
      MutexLock lock(mu_);
      closing_ = true;  // what is still held goes nowhere: the registry is going
    }
    Release();
    inner_.reset();  // joins the feed
  }

  // The inner store's feed comes here first.
  Status Follow(std::uint64_t revision, StoreListener* listener) override {
    listener_ = listener;
    return inner_->Follow(revision, this);
  }

  // StoreListener (the inner store's feed thread): changes wait while held.
  void OnChange(const Change& change) override {
    {
      MutexLock lock(mu_);
      held_.push_back(change.revision);
      cv_.NotifyAll();
      cv_.Wait(mu_, [&]() DROVER_REQUIRES(mu_) { return !holding_; });
      if (closing_) return;
    }
    listener_->OnChange(change);
  }
  void OnReset(StoreState state) override { listener_->OnReset(std::move(state)); }
  void OnRenewals(const std::vector<LeaseRenewal>& renewals) override {
    listener_->OnRenewals(renewals);
  }
  void OnFeedRestored() override { listener_->OnFeedRestored(); }
  void OnDegraded(const std::vector<std::string>& services) override {
    listener_->OnDegraded(services);
  }

  void Hold() {
    MutexLock lock(mu_);
    holding_ = true;
  }
  void Release() {
    MutexLock lock(mu_);
    holding_ = false;
    cv_.NotifyAll();
  }
  // Waits (up to 10 s) until the feed has brought a change at `revision` or later; its revision.
  std::uint64_t WaitArrived(std::uint64_t revision) {
    MutexLock lock(mu_);
    cv_.WaitFor(mu_, 10s,
                [&]() DROVER_REQUIRES(mu_) { return !held_.empty() && held_.back() >= revision; });
    return held_.empty() ? 0 : held_.back();
  }

 private:
  StoreListener* listener_ = nullptr;
  Mutex mu_;
  CondVar cv_;
  bool holding_ DROVER_GUARDED_BY(mu_) = false;
  bool closing_ DROVER_GUARDED_BY(mu_) = false;
  std::vector<std::uint64_t> held_ DROVER_GUARDED_BY(mu_);  // revisions the feed brought
};

// Registries over one etcd prefix, the first one's feed held at will.
class OwnCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Etcd().ok()) << Etcd().error();
    static int cases = 0;
    prefix_ = "/test/" + std::to_string(::getpid()) + "-own-" + std::to_string(++cases);
    auto inner = OpenEtcd(prefix_);
    ASSERT_NE(inner, nullptr);
    auto held = std::make_unique<HeldFeedStore>(std::move(inner));
    held_ = held.get();
    auto opened = Registry::Open(std::move(held), clock_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    registry_ = std::move(*opened);
  }
  static std::vector<std::string> Ids(const Registry& registry) {
    std::vector<std::string> ids;
    auto list = registry.List("zone");
    if (list.ok()) {
      for (const Instance& in : list->instances) ids.push_back(in.id);
    }
    return ids;
  }
  static std::vector<std::pair<std::string, std::uint64_t>> Puts(Watcher& watcher) {
    std::vector<std::pair<std::string, std::uint64_t>> puts;
    auto events = watcher.Next(0ms);
    if (events.ok()) {
      for (const Event& e : *events) {
        if (e.type == EventType::kPut) puts.emplace_back(e.instance.id, e.revision);
      }
    }
    return puts;
  }

  std::string prefix_;
  FakeClock clock_;
  HeldFeedStore* held_ = nullptr;
  std::unique_ptr<Registry> registry_;
};

// Nothing else wrote since this registry's view: its commit is applied here at once -- answered,
// listed and sent to watchers while the feed still holds it -- and the feed's copy adds nothing.
TEST_F(OwnCommitTest, ACommitRightAfterTheViewIsServedWithoutWaitingForTheFeed) {
  auto watcher = registry_->Watch(registry_->revision(), "zone");
  ASSERT_TRUE(watcher.ok());
  held_->Hold();
  auto rev = registry_->Register("zone", "z1", Spec(1));
  ASSERT_TRUE(rev.ok()) << rev.status().ToString();
  EXPECT_EQ(held_->WaitArrived(*rev), *rev);  // the feed has it, and holds it
  EXPECT_EQ(registry_->revision(), *rev);
  EXPECT_EQ(Ids(*registry_), std::vector<std::string>{"z1"});
  EXPECT_EQ(Puts(**watcher), (std::vector<std::pair<std::string, std::uint64_t>>{{"z1", *rev}}));

  held_->Release();
  auto second = registry_->Register("zone", "z2", Spec(1));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(held_->WaitArrived(*second), *second);
  EXPECT_EQ(Puts(**watcher), (std::vector<std::pair<std::string, std::uint64_t>>{{"z2", *second}}));
}

// Another registry wrote first: this one's next commit is not the revision after its view, so it
// is answered only once the feed has brought the other's change and its own, in their order.
TEST_F(OwnCommitTest, ACommitAfterAnotherProcesssWaitsForTheFeedAndKeepsTheOrder) {
  auto other_store = OpenEtcd(prefix_);
  ASSERT_NE(other_store, nullptr);
  auto other = Registry::Open(std::move(other_store), clock_);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  auto watcher = registry_->Watch(registry_->revision(), "zone");
  ASSERT_TRUE(watcher.ok());
  held_->Hold();
  auto first = (*other)->Register("zone", "y1", Spec(1));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(held_->WaitArrived(*first), *first);

  std::atomic<bool> answered{false};
  Result<std::uint64_t> mine = UnavailableError("not answered");
  std::thread writer([&] {
    mine = registry_->Register("zone", "z1", Spec(1));
    answered = true;
  });
  // Committed once the other registry (whose feed runs) has it; this one's feed is held at y1.
  EXPECT_TRUE(testing::Eventually([&] { return (*other)->revision() > *first; }));
  std::this_thread::sleep_for(100ms);  // time to answer, had it not waited
  EXPECT_FALSE(answered.load()) << "answered before this registry saw y1";
  EXPECT_EQ(Ids(*registry_), std::vector<std::string>{});

  held_->Release();
  writer.join();
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_EQ(*mine, *first + 1);
  EXPECT_EQ(Ids(*registry_), (std::vector<std::string>{"y1", "z1"}));
  EXPECT_EQ(Puts(**watcher),
            (std::vector<std::pair<std::string, std::uint64_t>>{{"y1", *first}, {"z1", *mine}}));
}

// On a shared store each writer answers its own group: every async write is answered once, after
// its commit (its revision is in the view when its answer runs), and each on a writer thread --
// never the caller's -- also when the registry goes at once after queuing them.
TEST_F(OwnCommitTest, AsyncWritesAreAnsweredByTheWritersAfterTheirCommitsAndBeforeTheRegistryGoes) {
  struct Answer {
    Result<std::uint64_t> revision = InternalError("not answered");
    bool listed = false;  // the view held the write's revision when it was answered
    std::thread::id thread;
    std::string thread_name;
  };
  Mutex mu;
  std::vector<Answer> answers;
  constexpr int kWrites = 40;
  Registry& registry = *registry_;
  for (int i = 0; i < kWrites; ++i) {
    registry.RegisterAsync("zone", "a" + std::to_string(i), Spec(1), [&](Result<std::uint64_t> r) {
      const bool listed = r.ok() && registry.revision() >= *r;
      char name[16] = {};
      ::pthread_getname_np(::pthread_self(), name, sizeof name);
      MutexLock lock(mu);
      answers.push_back({std::move(r), listed, std::this_thread::get_id(), name});
    });
  }
  registry_.reset();  // every queued write is committed and answered first
  ASSERT_EQ(answers.size(), static_cast<std::size_t>(kWrites));
  for (const Answer& a : answers) {
    ASSERT_TRUE(a.revision.ok()) << a.revision.status().ToString();
    EXPECT_TRUE(a.listed) << "answered before the view held revision " << *a.revision;
    EXPECT_NE(a.thread, std::this_thread::get_id());
    EXPECT_EQ(a.thread_name, "reg-writer");
  }
}

// A registry on SQLite behind a GatedStore, whose commits wait until the test opens it.
class RegistryGroupCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = OpenGatedRegistry(dir_.path(), clock_, store_);
    ASSERT_NE(registry_, nullptr);
  }

  testing::TempDir dir_;
  FakeClock clock_;
  GatedStore* store_ = nullptr;  // the registry's
  std::unique_ptr<Registry> registry_;
};

TEST_F(RegistryGroupCommitTest, WritesQueuedBehindACommitShareTheNextOneAndAnInstanceWaitsItsTurn) {
  Registry& registry = *registry_;
  GatedStore* store = store_;
  const auto wait_queued = [&](std::size_t n) {
    for (int i = 0; i < 2000 && registry.commit_counters().waiting < n; ++i) {
      std::this_thread::sleep_for(5ms);
    }
    return registry.commit_counters().waiting;
  };
  std::vector<Result<std::uint64_t>> answers(4, InternalError("not answered"));
  std::vector<std::jthread> writers;
  // The first write leads a batch of its own and waits in the store.
  writers.emplace_back([&] { answers[0] = registry.Register("svc", "a", Spec(1)); });
  for (int i = 0; i < 2000 && store->batches().empty(); ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(store->batches(), std::vector<std::size_t>{1});
  // Queued behind it, in this order: b registers, b drains (a second write to b), c registers.
  writers.emplace_back([&] { answers[1] = registry.Register("svc", "b", Spec(1)); });
  ASSERT_EQ(wait_queued(1), 1u);
  writers.emplace_back([&] {
    answers[2] = registry.SetState("svc", "b", 1, InstanceState::kDraining, std::nullopt);
  });
  ASSERT_EQ(wait_queued(2), 2u);
  writers.emplace_back([&] { answers[3] = registry.Register("svc", "c", Spec(1)); });
  ASSERT_EQ(wait_queued(3), 3u);
  store->Open();
  writers.clear();  // joins
  for (const auto& a : answers) ASSERT_TRUE(a.ok()) << a.status().ToString();
  // b and c shared one commit; b's drain waited for it (planned against a b not yet committed it
  // would have been NOT_FOUND) and came last.
  EXPECT_EQ(store->batches(), (std::vector<std::size_t>{1, 2, 1}));
  EXPECT_EQ(answers[0].value(), 1u);
  EXPECT_EQ(answers[1].value(), 2u);
  EXPECT_EQ(answers[3].value(), 3u);
  EXPECT_EQ(answers[2].value(), 4u);
  const CommitCounters counters = registry.commit_counters();
  EXPECT_EQ(counters.commits, 3u);
  EXPECT_EQ(counters.writes, 4u);
  EXPECT_EQ(counters.largest, 2u);
  EXPECT_EQ(registry.List("svc")->instances[1].spec.state, InstanceState::kDraining);
}

TEST_F(RegistryGroupCommitTest,
       AsyncWritesAreAnsweredAfterTheirCommitInOrderAndAllBeforeTheRegistryGoes) {
  struct Answer {
    Result<std::uint64_t> revision = InternalError("not answered");
    std::thread::id thread;
  };
  Mutex mu;
  std::vector<Answer> answers;  // in the order they came
  constexpr int kWrites = 20;
  for (int i = 0; i < kWrites; ++i) {
    registry_->RegisterAsync("svc", "i" + std::to_string(i), Spec(1), [&](Result<std::uint64_t> r) {
      MutexLock lock(mu);
      answers.push_back({std::move(r), std::this_thread::get_id()});
    });
  }
  // Nothing is answered while the first commit waits in the store.
  for (int i = 0; i < 2000 && store_->batches().empty(); ++i) std::this_thread::sleep_for(5ms);
  {
    MutexLock lock(mu);
    EXPECT_TRUE(answers.empty());
  }
  store_->Open();
  registry_.reset();  // the registry goes at once: every queued write is committed and answered
  ASSERT_EQ(answers.size(), static_cast<std::size_t>(kWrites));
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_TRUE(answers[static_cast<std::size_t>(i)].revision.ok());
    // In commit order, each after its own commit, all on the registry's one answer thread.
    EXPECT_EQ(answers[static_cast<std::size_t>(i)].revision.value(),
              static_cast<std::uint64_t>(i + 1));
    EXPECT_EQ(answers[static_cast<std::size_t>(i)].thread, answers[0].thread);
  }
  EXPECT_NE(answers[0].thread, std::this_thread::get_id());
}

}  // namespace
}  // namespace drover::registry
