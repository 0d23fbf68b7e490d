#include <gtest/gtest.h>

#include <map>

#include "drover/router.h"
#include "testing/endpoints.h"

namespace drover::router {
namespace {

using namespace std::chrono_literals;
using testing::ReadyEndpoint;
using testing::ReadyEndpoints;
using testing::Table;

TEST(SlowStartTest, RampValuesAtChosenTimes) {
  FakeClock clock;
  const MonoTime ready = clock.Now();
  SlowStartOptions linear;  // 30 s window, 10% floor, aggression 1
  auto factor_at = [&](Duration t, const SlowStartOptions& o) { return SlowStartFactor(t, o); };
  EXPECT_DOUBLE_EQ(factor_at(clock.Now() - ready, linear), 0.10);
  clock.Advance(1500ms);  // 5% of the window: the floor still holds
  EXPECT_DOUBLE_EQ(factor_at(clock.Now() - ready, linear), 0.10);
  clock.Advance(13500ms);  // 15 s
  EXPECT_DOUBLE_EQ(factor_at(clock.Now() - ready, linear), 0.50);
  clock.Advance(7500ms);  // 22.5 s
  EXPECT_DOUBLE_EQ(factor_at(clock.Now() - ready, linear), 0.75);
  clock.Advance(7500ms);  // 30 s
  EXPECT_DOUBLE_EQ(factor_at(clock.Now() - ready, linear), 1.0);
  clock.Advance(1h);
  EXPECT_DOUBLE_EQ(factor_at(clock.Now() - ready, linear), 1.0);

  SlowStartOptions aggressive;
  aggressive.aggression = 2.0;  // (t / window) ^ (1/2)
  EXPECT_DOUBLE_EQ(factor_at(7500ms, aggressive), 0.5);
  EXPECT_DOUBLE_EQ(factor_at(19200ms, aggressive), 0.8);

  SlowStartOptions off;
  off.window = Duration::zero();
  EXPECT_DOUBLE_EQ(factor_at(0s, off), 1.0);
  // Clock skew (ready in the future) counts as just became ready.
  EXPECT_DOUBLE_EQ(factor_at(-5s, linear), 0.10);
}

TEST(P2cTest, EffectiveWeightRampsOnFakeClock) {
  FakeClock clock;
  std::vector<Endpoint> endpoints = {ReadyEndpoint("old", 4), ReadyEndpoint("new", 4)};
  endpoints[1].ready_since = clock.Now();
  clock.Advance(12s);
  auto table = Table(endpoints);
  P2cPicker p2c = P2cPicker::Build(*table);
  const std::size_t old_i = *table->IndexOf("old");
  const std::size_t new_i = *table->IndexOf("new");
  EXPECT_DOUBLE_EQ(p2c.EffectiveWeight(old_i, clock.Now()), 4.0);  // READY since "long ago"
  EXPECT_DOUBLE_EQ(p2c.EffectiveWeight(new_i, clock.Now()), 4.0 * 0.4);
  clock.Advance(18s);
  EXPECT_DOUBLE_EQ(p2c.EffectiveWeight(new_i, clock.Now()), 4.0);
}

TEST(P2cTest, NeverPicksExcludedEndpoints) {
  std::vector<Endpoint> endpoints = ReadyEndpoints(8);
  endpoints[0].state = EndpointState::kStarting;
  endpoints[1].state = EndpointState::kDraining;
  endpoints[2].accepting = false;
  endpoints[3].weight = 0;
  auto table = Table(endpoints);
  P2cPicker p2c = P2cPicker::Build(*table);
  EXPECT_EQ(p2c.members(), 4u);
  Xoshiro256 random(11);
  // Excluded endpoints look idle (load 0) -- the most tempting choice for least-connections.
  std::vector<std::uint64_t> loads = {0, 0, 0, 0, 50, 60, 70, 80};
  std::map<std::size_t, int> seen;
  for (int i = 0; i < 10'000; ++i) {
    const std::size_t picked = *p2c.Pick(loads, MonoTime{}, random);
    ++seen[picked];
    ++loads[picked];
  }
  for (const auto& [index, count] : seen) EXPECT_GE(index, 4u) << "picked excluded " << index;
  EXPECT_EQ(seen.size(), 4u);
}

TEST(P2cTest, UnsetReadySinceMeansFullWeight) {
  FakeClock clock;
  auto table = Table({ReadyEndpoint("known-before-start", 2)});
  EXPECT_DOUBLE_EQ(P2cPicker::Build(*table).EffectiveWeight(0, clock.Now()), 2.0);
}

TEST(P2cTest, TooFewLoadsIsAnError) {
  auto table = Table(ReadyEndpoints(4));
  Xoshiro256 random(1);
  std::vector<std::uint64_t> loads(2, 0);
  EXPECT_EQ(P2cPicker::Build(*table).Pick(loads, MonoTime{}, random).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(P2cTest, SingleAndNoMembers) {
  Xoshiro256 random(3);
  auto one = Table({ReadyEndpoint("only")});
  std::vector<std::uint64_t> loads = {1000};
  EXPECT_EQ(*P2cPicker::Build(*one).Pick(loads, MonoTime{}, random), 0u);
  std::vector<Endpoint> none = ReadyEndpoints(3);
  for (auto& e : none) e.state = EndpointState::kDraining;
  auto result = P2cPicker::Build(*Table(none)).Pick(loads, MonoTime{}, random);
  EXPECT_EQ(result.status().code(), StatusCode::kUnavailable);
}

TEST(P2cTest, PrefersTheLessLoadedCandidate) {
  auto table = Table(ReadyEndpoints(2));
  P2cPicker p2c = P2cPicker::Build(*table);
  Xoshiro256 random(5);
  std::vector<std::uint64_t> loads = {10, 3};
  // With two members both are always candidates, so the less loaded always wins.
  for (int i = 0; i < 100; ++i) EXPECT_EQ(*p2c.Pick(loads, MonoTime{}, random), 1u);
}

// Seed 000: a fresh instance with zero connections joins nine warm ones carrying 100 each.
// Plain least-connections sends it every new player; slow start limits it to a trickle.
int NewcomerShare(const SlowStartOptions& options) {
  FakeClock clock;
  std::vector<Endpoint> endpoints = ReadyEndpoints(10);
  endpoints[9].ready_since = clock.Now();
  auto table = Table(endpoints);
  P2cPicker p2c = P2cPicker::Build(*table, options);
  std::vector<std::uint64_t> loads(10, 100);
  loads[*table->IndexOf("node-9")] = 0;
  Xoshiro256 random(17);
  int newcomer = 0;
  for (int i = 0; i < 100; ++i) {
    const std::size_t picked = *p2c.Pick(loads, clock.Now(), random);
    ++loads[picked];
    newcomer += table->at(picked).id == "node-9";
  }
  return newcomer;
}

TEST(P2cTest, SlowStartStopsTheColdInstanceTakingEveryNewConnection) {
  SlowStartOptions no_slow_start;
  no_slow_start.window = Duration::zero();
  const int without = NewcomerShare(no_slow_start);
  const int with = NewcomerShare(SlowStartOptions{});
  EXPECT_GE(without, 15);  // most of the picks it is drawn into, it wins
  EXPECT_LE(with, 11);     // at 10% weight it looks full after ~10 connections
  EXPECT_LT(with, without);
}

TEST(P2cTest, WorksWhenEveryEndpointIsNew) {
  FakeClock clock;
  std::vector<Endpoint> endpoints = ReadyEndpoints(4);
  for (auto& e : endpoints) e.ready_since = clock.Now();
  auto table = Table(endpoints);
  P2cPicker p2c = P2cPicker::Build(*table);
  Xoshiro256 random(23);
  std::vector<std::uint64_t> loads(4, 0);
  for (int i = 0; i < 4000; ++i) ++loads[*p2c.Pick(loads, clock.Now(), random)];
  for (std::uint64_t l : loads) EXPECT_NEAR(static_cast<double>(l), 1000.0, 20.0);
}

TEST(P2cTest, WeightsShiftLoad) {
  auto table = Table({ReadyEndpoint("small", 1), ReadyEndpoint("big", 3)});
  P2cPicker p2c = P2cPicker::Build(*table);
  Xoshiro256 random(29);
  std::vector<std::uint64_t> loads(2, 0);
  for (int i = 0; i < 4000; ++i) ++loads[*p2c.Pick(loads, MonoTime{}, random)];
  EXPECT_NEAR(static_cast<double>(loads[*table->IndexOf("big")]), 3000.0, 10.0);
}

TEST(XoshiroTest, SameSeedSameSequenceAndUniformRange) {
  Xoshiro256 a(99), b(99), c(100);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const std::uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    differs |= x != c.Next();
  }
  EXPECT_TRUE(differs);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_LT(a.Uniform(7), 7u);
    const double d = a.UniformDouble();
    EXPECT_GE(d, 0.0);
    EXPECT_LT(d, 1.0);
  }
}

}  // namespace
}  // namespace drover::router
