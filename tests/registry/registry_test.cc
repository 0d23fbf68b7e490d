#include "registry/registry.h"

#include <gtest/gtest.h>

#include "registry/sqlite_store.h"
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

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    Reopen();
  }

  void Reopen(RegistryOptions options = {}) {
    registry_.reset();  // closes the database before it is opened again
    auto store = SqliteStore::Open(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto registry = Registry::Open(std::move(*store), clock_, options);
    ASSERT_TRUE(registry.ok()) << registry.status().ToString();
    registry_ = std::move(*registry);
  }

  std::vector<Event> Drain(Watcher& watcher) {
    auto events = watcher.Next(0ms);
    EXPECT_TRUE(events.ok());
    return events.ok() ? *events : std::vector<Event>{};
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Registry> registry_;
};

TEST_F(RegistryTest, RegisterListWatch) {
  auto rev = registry_->Register("zone", "z1", Spec(1));
  ASSERT_TRUE(rev.ok()) << rev.status().ToString();
  EXPECT_EQ(*rev, 1u);

  auto list = registry_->List("zone");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->revision, 1u);
  EXPECT_FALSE(list->degraded);
  ASSERT_EQ(list->instances.size(), 1u);
  EXPECT_EQ(list->instances[0].id, "z1");
  EXPECT_EQ(list->instances[0].create_revision, 1u);
  EXPECT_EQ(list->instances[0].ready_since, clock_.SystemNow());

  auto watcher = registry_->Watch(0, "zone");
  ASSERT_TRUE(watcher.ok());
  auto first = Drain(**watcher);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].type, EventType::kResync);
  EXPECT_EQ(first[0].revision, 1u);
  ASSERT_EQ(first[0].snapshot.size(), 1u);

  ASSERT_TRUE(registry_->Register("zone", "z2", Spec(1)).ok());
  ASSERT_TRUE(registry_->Register("other", "o1", Spec(1)).ok());  // filtered out
  auto next = Drain(**watcher);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].type, EventType::kPut);
  EXPECT_EQ(next[0].instance.id, "z2");
  EXPECT_EQ(next[0].revision, 2u);

  // An unknown service is an empty list at the current revision, not an error.
  auto none = registry_->List("nobody");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->instances.empty());
  EXPECT_EQ(none->revision, 3u);
}

TEST_F(RegistryTest, FencingRejectsLowerGenerationOnEveryWrite) {
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

TEST_F(RegistryTest, TombstoneStopsLateRegisterAndHeartbeat) {
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

TEST_F(RegistryTest, TombstoneLastsAtLeastOneTtl) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1, InstanceState::kReady, 5'000)).ok());
  ASSERT_TRUE(registry_->Deregister("svc", "a", 1).ok());
  clock_.Advance(4'999ms);
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_EQ(registry_->Register("svc", "a", Spec(1)).status().code(), StatusCode::kAborted);
  clock_.Advance(1ms);
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_TRUE(registry_->Register("svc", "a", Spec(1)).ok());
}

TEST_F(RegistryTest, DrainIsStickyAgainstHeartbeatsAndReRegister) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1)).ok());
  ASSERT_TRUE(registry_->SetState("svc", "a", 1, InstanceState::kDraining, std::nullopt).ok());
  ASSERT_TRUE(registry_->Heartbeat("svc", "a", 1).ok());
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1, InstanceState::kReady)).ok());
  auto list = registry_->List("svc");
  ASSERT_EQ(list->instances.size(), 1u);
  EXPECT_EQ(list->instances[0].spec.state, InstanceState::kDraining);
  EXPECT_EQ(list->instances[0].ready_since, SystemTime{});

  auto watcher = registry_->Watch(registry_->revision(), "svc");
  ASSERT_TRUE(registry_->Deregister("svc", "a", 1).ok());
  auto events = Drain(**watcher);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, EventType::kDelete);
  EXPECT_EQ(events[0].reason, RemovalReason::kDrain);
}

TEST_F(RegistryTest, SetStateCannotUndoADrain) {
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

TEST_F(RegistryTest, RefusedWriteDoesNotRenewTheLease) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1, InstanceState::kReady, 10'000)).ok());
  ASSERT_TRUE(registry_->SetState("svc", "a", 1, InstanceState::kDraining, std::nullopt).ok());
  clock_.Advance(9s);
  EXPECT_FALSE(registry_->SetState("svc", "a", 1, InstanceState::kReady, std::nullopt).ok());
  clock_.Advance(1s);
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_TRUE(registry_->List("svc")->instances.empty());
  EXPECT_TRUE(registry_->Services().empty());  // an empty service is forgotten
}

TEST_F(RegistryTest, AcceptingIsSeparateFromReadiness) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1)).ok());
  const SystemTime ready = registry_->List("svc")->instances[0].ready_since;
  clock_.Advance(1s);
  ASSERT_TRUE(registry_->SetState("svc", "a", 1, std::nullopt, false).ok());
  auto in = registry_->List("svc")->instances[0];
  EXPECT_FALSE(in.spec.accepting);
  EXPECT_EQ(in.spec.state, InstanceState::kReady);
  EXPECT_EQ(in.ready_since, ready);  // still READY since then
}

TEST_F(RegistryTest, NewGenerationReplacesOldWithFenceEvent) {
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

TEST_F(RegistryTest, LeasesExpireOnFakeClockWithReason) {
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

TEST_F(RegistryTest, HeartbeatAllAnswersEachRenewalAsHeartbeatWould) {
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

TEST_F(RegistryTest, ExpiryLeavesATombstone) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1, InstanceState::kReady, 10'000)).ok());
  clock_.Advance(10s);
  ASSERT_TRUE(registry_->Tick().ok());
  EXPECT_TRUE(registry_->List("svc")->instances.empty());
  // A heartbeat that arrives just too late cannot bring the expired incarnation back.
  EXPECT_EQ(registry_->Heartbeat("svc", "a", 1).status().code(), StatusCode::kAborted);
  EXPECT_EQ(registry_->Register("svc", "a", Spec(1)).status().code(), StatusCode::kAborted);
  EXPECT_TRUE(registry_->Register("svc", "a", Spec(2)).ok());
}

TEST_F(RegistryTest, SelfPreservationFreezesMassExpiry) {
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

TEST_F(RegistryTest, WatcherResumesFromOldRevisionWithoutGaps) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(1)).ok());
  const std::uint64_t resume_from = registry_->revision();
  ASSERT_TRUE(registry_->Register("svc", "b", Spec(1)).ok());
  ASSERT_TRUE(registry_->SetState("svc", "a", 1, InstanceState::kDraining, std::nullopt).ok());
  ASSERT_TRUE(registry_->Deregister("svc", "b", 1).ok());
  auto watcher = registry_->Watch(resume_from, "svc");
  ASSERT_TRUE(watcher.ok());
  auto events = Drain(**watcher);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].revision, resume_from + 1);
  EXPECT_EQ(events[1].revision, resume_from + 2);
  EXPECT_EQ(events[2].revision, resume_from + 3);
  EXPECT_EQ(events[2].type, EventType::kDelete);
  EXPECT_EQ(registry_->Watch(registry_->revision() + 1, "").status().code(),
            StatusCode::kOutOfRange);
}

TEST_F(RegistryTest, ResyncWhenHistoryIsGone) {
  RegistryOptions options;
  options.history = 4;
  Reopen(options);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(registry_->Register("svc", "i" + std::to_string(i), Spec(1)).ok());
  }
  auto watcher = registry_->Watch(2, "svc");
  auto events = Drain(**watcher);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, EventType::kResync);
  EXPECT_EQ(events[0].revision, 10u);
  EXPECT_EQ(events[0].snapshot.size(), 10u);
  // Recent enough: replayed event by event.
  auto recent = registry_->Watch(7, "svc");
  EXPECT_EQ(Drain(**recent).size(), 3u);
}

TEST_F(RegistryTest, SlowWatcherGetsResyncInsteadOfAGap) {
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
    EXPECT_EQ(events[i].revision, last + 1);
    last = events[i].revision;
    ++known;
  }
  EXPECT_EQ(last, registry_->revision());
  EXPECT_EQ(known, 5u);
}

TEST_F(RegistryTest, OverflowNeverDuplicatesOrReordersEvents) {
  RegistryOptions options;
  options.watcher_queue_limit = 2;
  options.history = 100;
  Reopen(options);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(
        registry_->Register("svc", "i" + std::to_string(i), Spec(1, InstanceState::kReady, 10'000))
            .ok());
  }
  // A replay longer than the queue starts with a RESYNC instead of overflowing mid-way.
  auto replay = registry_->Watch(1, "svc");
  auto replayed = Drain(**replay);
  ASSERT_EQ(replayed.size(), 1u);
  EXPECT_EQ(replayed[0].type, EventType::kResync);
  EXPECT_EQ(replayed[0].revision, 6u);

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

TEST_F(RegistryTest, DegradedChangeIsAnnouncedAtOnce) {
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

TEST_F(RegistryTest, ProgressEventsOnIdleWatchers) {
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

TEST_F(RegistryTest, CancelledWatcherReportsCancelled) {
  auto watcher = registry_->Watch(0, "");
  (*watcher)->Cancel();
  EXPECT_EQ((*watcher)->Next(10ms).status().code(), StatusCode::kCancelled);
}

TEST_F(RegistryTest, RestartKeepsRegistrationsAndGrantsFreshLeases) {
  ASSERT_TRUE(registry_->Register("svc", "a", Spec(7, InstanceState::kReady, 10'000)).ok());
  ASSERT_TRUE(registry_->SetState("svc", "a", 7, InstanceState::kDraining, std::nullopt).ok());
  ASSERT_TRUE(registry_->Register("svc", "b", Spec(1)).ok());
  ASSERT_TRUE(registry_->Deregister("svc", "b", 1).ok());
  const std::uint64_t revision = registry_->revision();
  clock_.Advance(9s);  // a's lease almost lapsed when the registry goes down
  Reopen();
  EXPECT_EQ(registry_->revision(), revision);
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

TEST_F(RegistryTest, InvalidWritesChangeNothing) {
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

}  // namespace
}  // namespace drover::registry
