// The gateway's pick on hand-made tables: only READY + accepting instances, retries never return
// to an instance already tried, keys stay put, slow start holds a newcomer back.
#include "gateway/upstream.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace drover::gateway {
namespace {

using namespace std::chrono_literals;

router::Endpoint Ready(std::string id, std::optional<MonoTime> since = std::nullopt) {
  router::Endpoint e;
  e.id = std::move(id);
  e.address = "127.0.0.1:1";
  e.state = router::EndpointState::kReady;
  e.ready_since = since;
  return e;
}

std::shared_ptr<const router::RoutingTable> Table(std::uint64_t version,
                                                  std::vector<router::Endpoint> endpoints) {
  return router::RoutingTable::Create(version, std::move(endpoints)).value();
}

ListenerConfig Listener(Policy policy) {
  ListenerConfig l;
  l.name = "zone";
  l.address = "127.0.0.1:0";
  l.service = "zone";
  l.policy = policy;
  l.slow_start = 10s;
  return l;
}

class UpstreamTest : public ::testing::TestWithParam<Policy> {
 protected:
  FakeClock clock_;
  router::Xoshiro256 random_{7};
};

TEST_P(UpstreamTest, OnlyReadyAndAcceptingInstancesAreEverPicked) {
  auto up = Upstream::ForTables(Listener(GetParam()), clock_);
  EXPECT_EQ(up->Pick(*up->Snapshot(), 1, {}, clock_.Now(), random_).status().code(),
            StatusCode::kUnavailable);  // nothing discovered: a clean error, no crash
  router::Endpoint starting = Ready("a");
  starting.state = router::EndpointState::kStarting;
  router::Endpoint draining = Ready("b");
  draining.state = router::EndpointState::kDraining;
  router::Endpoint full = Ready("c");
  full.accepting = false;
  up->Apply(Table(5, {starting, draining, full, Ready("d")}));
  const auto snapshot = up->Snapshot();
  EXPECT_EQ(snapshot->version(), 5u);
  for (std::uint64_t key = 0; key < 500; ++key) {
    auto pick =
        up->Pick(*snapshot, router::HashKey(std::to_string(key)), {}, clock_.Now(), random_);
    ASSERT_TRUE(pick.ok());
    EXPECT_EQ(snapshot->router->table->at(*pick).id, "d");
  }
  // "d" already tried: nothing is left, and the error says why.
  auto none = up->Pick(*snapshot, 1, {3}, clock_.Now(), random_);
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(none.status().message().find("no routable instance of 'zone'"), std::string::npos);
}

TEST_P(UpstreamTest, RetriesNeverReturnToAnInstanceAlreadyTried) {
  auto up = Upstream::ForTables(Listener(GetParam()), clock_);
  up->Apply(Table(1, {Ready("a"), Ready("b"), Ready("c")}));
  const auto snapshot = up->Snapshot();
  for (std::uint64_t key = 0; key < 300; ++key) {
    std::vector<std::size_t> tried;
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto pick =
          up->Pick(*snapshot, router::HashKey(std::to_string(key)), tried, clock_.Now(), random_);
      ASSERT_TRUE(pick.ok());
      EXPECT_EQ(std::count(tried.begin(), tried.end(), *pick), 0);
      tried.push_back(*pick);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, UpstreamTest,
                         ::testing::Values(Policy::kP2c, Policy::kHash, Policy::kLeastConn));

TEST(UpstreamPolicyTest, HashKeepsAKeyOnItsInstanceAcrossTables) {
  FakeClock clock;
  router::Xoshiro256 random(1);
  auto up = Upstream::ForTables(Listener(Policy::kHash), clock);  // migration_steps: 4
  up->Apply(Table(1, {Ready("a"), Ready("b"), Ready("c"), Ready("d")}));
  const auto before = up->Snapshot();
  EXPECT_FALSE(before->migration);  // the first table moves nothing
  up->Apply(Table(2, {Ready("a"), Ready("b"), Ready("c"), Ready("d"), Ready("e")}));
  // A staged migration: each step a snapshot of its own; after the last, the plain table.
  std::vector<std::shared_ptr<const UpstreamSnapshot>> steps = {up->Snapshot()};
  while (up->AdvanceMigration()) steps.push_back(up->Snapshot());
  ASSERT_EQ(steps.size(), 5u);
  EXPECT_EQ(steps.front()->migration_step, 1u);
  EXPECT_EQ(steps[3]->migration_step, 4u);
  EXPECT_FALSE(steps.back()->migration);
  auto owner = [&](const UpstreamSnapshot& s, std::uint64_t h) {
    return s.router->table->at(*up->Pick(s, h, {}, clock.Now(), random)).id;
  };
  std::vector<int> moved(steps.size(), 0);
  int to_newcomer = 0;
  for (int k = 0; k < 2000; ++k) {
    const std::uint64_t h = router::HashKey("player" + std::to_string(k));
    const std::string x = owner(*before, h);
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const std::string y = owner(*steps[i], h);
      if (x != y) ++moved[i];
      if (i + 1 == steps.size() && x != y && y == "e") ++to_newcomer;
    }
  }
  // About 1/5 of the keys move in the end (mod-N would move 4/5), nearly all of them to the
  // newcomer (Maglev trades a little extra churn between old members for its even spread), a
  // quarter of them per step.
  const int total = moved.back();
  EXPECT_GT(total, 2000 / 5 / 2);
  EXPECT_LT(total, 2000 / 5 * 2);
  EXPECT_GT(to_newcomer, total * 8 / 10);
  for (std::size_t i = 0; i + 1 < steps.size(); ++i) {
    EXPECT_NEAR(moved[i], total * static_cast<double>(i + 1) / 4, total * 0.12) << "step " << i + 1;
  }
  EXPECT_EQ(moved[3], total);  // the last step is the new table
}

TEST(UpstreamPolicyTest, SlowStartHoldsANewcomerBackWhereLeastConnectionsFloodsIt) {
  FakeClock clock;
  router::Xoshiro256 random(3);
  // Three loaded instances since long ago, one that became READY just now.
  const auto table =
      Table(1, {Ready("old1"), Ready("old2"), Ready("old3"), Ready("new", clock.Now())});
  auto share_of_new = [&](Policy policy) {
    auto up = Upstream::ForTables(Listener(policy), clock);
    up->Apply(table);
    const auto snapshot = up->Snapshot();
    for (const char* id : {"old1", "old2", "old3"}) {
      snapshot->counters[*snapshot->router->table->IndexOf(id)]->active = 100;
    }
    int to_new = 0;
    for (int n = 0; n < 200; ++n) {  // 200 new sessions arrive before anything closes
      const std::size_t pick = *up->Pick(*snapshot, 0, {}, clock.Now(), random);
      snapshot->counters[pick]->active++;
      to_new += snapshot->router->table->at(pick).id == "new" ? 1 : 0;
    }
    return to_new / 200.0;
  };
  const double least_conn = share_of_new(Policy::kLeastConn);
  const double p2c = share_of_new(Policy::kP2c);
  EXPECT_GT(least_conn, 0.45);  // seed 000: every new player goes to the cold instance
  EXPECT_LT(p2c, 0.15);         // at 10% weight it takes a small share
}

TEST(UpstreamPolicyTest, CountersFollowTheInstanceAcrossTables) {
  FakeClock clock;
  auto up = Upstream::ForTables(Listener(Policy::kP2c), clock);
  up->Apply(Table(1, {Ready("a"), Ready("b")}));
  auto first = up->Snapshot();
  first->counters[1]->active = 7;
  up->Apply(Table(2, {Ready("0"), Ready("a"), Ready("b")}));  // "b" moved to index 2
  EXPECT_EQ(up->Snapshot()->counters[2]->active.load(), 7u);
  up->Apply(Table(1, {Ready("z")}));  // older: ignored
  EXPECT_EQ(up->Snapshot()->version(), 2u);
}

TEST(UpstreamHealthTest, ConsecutiveConnectFailuresEjectWithBackoffAndTheInstanceReturns) {
  FakeClock clock;
  router::Xoshiro256 random(5);
  ListenerConfig l = Listener(Policy::kP2c);
  l.eject_after_failures = 3;
  l.ejection = 10s;
  l.max_ejection = 25s;
  auto up = Upstream::ForTables(l, clock);
  up->Apply(Table(1, {Ready("a"), Ready("b")}));
  const auto snapshot = up->Snapshot();
  const std::size_t a = *snapshot->router->table->IndexOf("a");
  auto picks_of_a = [&] {
    int n = 0;
    for (int i = 0; i < 100; ++i) n += *up->Pick(*snapshot, 0, {}, clock.Now(), random) == a;
    return n;
  };
  up->ReportConnect(*snapshot, a, false, clock.Now());
  up->ReportConnect(*snapshot, a, false, clock.Now());
  up->ReportConnect(*snapshot, a, true, clock.Now());  // a success resets the streak
  up->ReportConnect(*snapshot, a, false, clock.Now());
  up->ReportConnect(*snapshot, a, false, clock.Now());
  EXPECT_GT(picks_of_a(), 0);
  up->ReportConnect(*snapshot, a, false, clock.Now());  // third in a row: ejected for 10 s
  EXPECT_EQ(picks_of_a(), 0);
  EXPECT_EQ(snapshot->counters[a]->ejections_total.load(), 1u);
  clock.Advance(10s);
  EXPECT_GT(picks_of_a(), 0);  // back
  for (int i = 0; i < 3; ++i) up->ReportConnect(*snapshot, a, false, clock.Now());
  clock.Advance(19s);  // second ejection: 20 s
  EXPECT_EQ(picks_of_a(), 0);
  clock.Advance(1s);
  EXPECT_GT(picks_of_a(), 0);
  for (int i = 0; i < 3; ++i) up->ReportConnect(*snapshot, a, false, clock.Now());
  clock.Advance(25s);  // third: 40 s, capped at 25 s
  EXPECT_GT(picks_of_a(), 0);
}

TEST(UpstreamHealthTest, NeverEjectsMoreThanTheAllowedShare) {
  FakeClock clock;
  ListenerConfig l = Listener(Policy::kP2c);
  l.eject_after_failures = 1;
  l.max_ejected_percent = 50;
  auto up = Upstream::ForTables(l, clock);
  up->Apply(Table(1, {Ready("a"), Ready("b"), Ready("c"), Ready("d")}));
  const auto snapshot = up->Snapshot();
  for (std::size_t i = 0; i < 4; ++i) up->ReportConnect(*snapshot, i, false, clock.Now());
  int ejected = 0;
  for (std::size_t i = 0; i < 4; ++i) ejected += snapshot->counters[i]->Ejected(clock.Now());
  EXPECT_EQ(ejected, 2);  // half of four, however many fail
}

TEST(UpstreamHealthTest, FailedChecksTakeAnInstanceOutAndEveryoneFailingMeansPanicRouting) {
  FakeClock clock;
  router::Xoshiro256 random(9);
  ListenerConfig l = Listener(Policy::kLeastConn);
  l.unhealthy_threshold = 2;
  l.healthy_threshold = 2;
  auto up = Upstream::ForTables(l, clock);
  up->Apply(Table(1, {Ready("a"), Ready("b")}));
  const auto snapshot = up->Snapshot();
  InstanceCounters& a = *snapshot->counters[0];
  InstanceCounters& b = *snapshot->counters[1];
  up->ReportCheck(a, false);
  EXPECT_FALSE(a.unhealthy.load());  // one failure is not enough
  up->ReportCheck(a, false);
  EXPECT_TRUE(a.unhealthy.load());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(*up->Pick(*snapshot, 0, {}, clock.Now(), random), 1u);
  up->ReportCheck(b, false);
  up->ReportCheck(b, false);
  // Both failing: refusing every client would help no one, so health is ignored.
  std::set<std::size_t> picked;
  for (int i = 0; i < 50; ++i) {
    const std::size_t p = *up->Pick(*snapshot, 0, {}, clock.Now(), random);
    snapshot->counters[p]->active++;
    picked.insert(p);
  }
  EXPECT_EQ(picked.size(), 2u);
  up->ReportCheck(a, true);
  EXPECT_TRUE(a.unhealthy.load());
  up->ReportCheck(a, true);
  EXPECT_FALSE(a.unhealthy.load());
}

}  // namespace
}  // namespace drover::gateway
