#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "drover/router.h"
#include "testing/endpoints.h"

namespace drover::router {
namespace {

using testing::KeyHashes;
using testing::ReadyEndpoint;
using testing::ReadyEndpoints;
using testing::Table;

TEST(BoundedLoadCapTest, MatchesFormula) {
  // ceil(1.25 * (total + 1) / N) for equal weights.
  EXPECT_EQ(BoundedLoadCap(1.25, 999'999, 1, 100), 12500u);
  EXPECT_EQ(BoundedLoadCap(1.25, 0, 1, 10), 1u);
  EXPECT_EQ(BoundedLoadCap(1.25, 99, 1, 10), 13u);
  // Weighted: a weight-3 member of total weight 4 gets three quarters of the budget.
  EXPECT_EQ(BoundedLoadCap(1.0, 99, 3, 4), 75u);
  EXPECT_EQ(BoundedLoadCap(1.25, 10, 0, 4), 0u);
  EXPECT_EQ(BoundedLoadCap(1.25, 10, 1, 0), 0u);
  // Saturates instead of overflowing the conversion.
  EXPECT_GT(BoundedLoadCap(1e30, ~std::uint64_t{0} - 1, 1, 1), std::uint64_t{1} << 62);
}

// Routes `draws` one at a time, each adding a unit of load that stays, and checks after every
// pick that the chosen endpoint is within its cap as of the moment it was chosen.
template <typename Picker>
void ExpectNeverOverCap(const Picker& picker, const RoutingTable& table,
                        const std::vector<std::uint64_t>& draws, double c) {
  std::vector<std::uint64_t> loads(table.size(), 0);
  std::uint64_t total = 0, total_weight = 0;
  for (const auto& e : table.endpoints()) total_weight += e.weight;
  for (std::uint64_t h : draws) {
    auto picked = picker.PickBounded(h, LoadView{loads, total}, {c});
    ASSERT_TRUE(picked.ok()) << picked.status().ToString();
    const std::uint64_t cap = BoundedLoadCap(c, total, table.at(*picked).weight, total_weight);
    ++loads[*picked];
    ++total;
    ASSERT_LE(loads[*picked], cap);
  }
  // The cap is a ceiling, so the final peak may exceed c * mean by less than one unit.
  const double mean = static_cast<double>(total) / table.size();
  EXPECT_LT(*std::max_element(loads.begin(), loads.end()), c * mean + 1);
}

std::vector<std::uint64_t> SkewedDraws(std::size_t count) {
  // One planted hot key carries half of all traffic; the rest are distinct cold keys.
  std::vector<std::uint64_t> draws;
  const std::uint64_t hot = HashKey("boss-1");
  auto cold = KeyHashes(count / 2, "cold-");
  for (std::size_t i = 0; i < count / 2; ++i) {
    draws.push_back(hot);
    draws.push_back(cold[i]);
  }
  return draws;
}

TEST(BoundedLoadTest, RingNeverExceedsCapUnderUniformAndSkewedKeys) {
  auto table = Table(ReadyEndpoints(20));
  RingHash ring = RingHash::Build(*table);
  ExpectNeverOverCap(ring, *table, KeyHashes(50'000), 1.25);
  ExpectNeverOverCap(ring, *table, SkewedDraws(50'000), 1.25);
}

TEST(BoundedLoadTest, MaglevNeverExceedsCapUnderUniformAndSkewedKeys) {
  auto table = Table(ReadyEndpoints(20));
  Maglev maglev = Maglev::Build(*table);
  ExpectNeverOverCap(maglev, *table, KeyHashes(50'000), 1.25);
  ExpectNeverOverCap(maglev, *table, SkewedDraws(50'000), 1.1);
}

TEST(BoundedLoadTest, WeightedCapsHold) {
  auto table = Table({ReadyEndpoint("a", 1), ReadyEndpoint("b", 2), ReadyEndpoint("c", 4)});
  RingHash ring = RingHash::Build(*table);
  std::vector<std::uint64_t> loads(3, 0);
  std::uint64_t total = 0;
  for (std::uint64_t h : SkewedDraws(20'000)) {
    const std::size_t i = *ring.PickBounded(h, LoadView{loads, total});
    ASSERT_LE(loads[i] + 1, BoundedLoadCap(1.25, total, table->at(i).weight, 7));
    ++loads[i];
    ++total;
  }
  // The heavy endpoint carries about 4/7 of the load, never more than its cap.
  EXPECT_GT(loads[2], loads[0]);
}

TEST(BoundedLoadTest, UnderCapOwnerKeepsItsKeys) {
  auto table = Table(ReadyEndpoints(10));
  RingHash ring = RingHash::Build(*table);
  std::vector<std::uint64_t> zero(10, 0);
  for (std::uint64_t h : KeyHashes(2000)) {
    EXPECT_EQ(*ring.PickBounded(h, LoadView{zero, 0}), *ring.Pick(h));
  }
}

TEST(BoundedLoadTest, FullOwnerSpillsToItsSuccessorDeterministically) {
  auto table = Table(ReadyEndpoints(10));
  RingHash ring = RingHash::Build(*table);
  const std::uint64_t h = HashKey("boss-1");
  const std::size_t owner = *ring.Pick(h);
  std::vector<std::uint64_t> loads(10, 10);
  loads[owner] = 20;  // cap = ceil(1.25 * 101 / 10) = 13
  const std::size_t first = *ring.PickBounded(h, LoadView{loads, 110});
  EXPECT_NE(first, owner);
  EXPECT_EQ(*ring.PickBounded(h, LoadView{loads, 110}), first);
}

TEST(BoundedLoadTest, FullFleetFailsFastWithoutVisitingEverySlot) {
  auto table = Table(ReadyEndpoints(50));
  Maglev maglev = Maglev::Build(*table);
  RingHash ring = RingHash::Build(*table);
  std::vector<std::uint64_t> loads(50, 1000);  // everyone far over cap = ceil(1.25 * 1001 / 50)
  for (std::uint64_t h : KeyHashes(200)) {
    EXPECT_EQ(maglev.PickBounded(h, LoadView{loads, 1000}).status().code(),
              StatusCode::kUnavailable);
    EXPECT_EQ(ring.PickBounded(h, LoadView{loads, 1000}).status().code(), StatusCode::kUnavailable);
  }
}

TEST(BoundedLoadTest, ClearErrorsForBadInput) {
  auto table = Table(ReadyEndpoints(4));
  RingHash ring = RingHash::Build(*table);
  Maglev maglev = Maglev::Build(*table);
  std::vector<std::uint64_t> short_loads(2, 0);
  EXPECT_EQ(ring.PickBounded(1, LoadView{short_loads, 0}).status().code(),
            StatusCode::kInvalidArgument);
  std::vector<std::uint64_t> loads(4, 0);
  EXPECT_EQ(maglev.PickBounded(1, LoadView{loads, 0}, {0.5}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(maglev.PickBounded(1, LoadView{loads, 0}, {HUGE_VAL}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RingHash::Build(*Table({})).PickBounded(1, LoadView{{}, 0}).status().code(),
            StatusCode::kUnavailable);

  // Every member refusing new work: an error, not a pick of a full endpoint.
  std::vector<Endpoint> endpoints = ReadyEndpoints(4);
  for (auto& e : endpoints) e.accepting = false;
  auto closed = Table(endpoints);
  EXPECT_EQ(RingHash::Build(*closed).PickBounded(1, LoadView{loads, 0}).status().code(),
            StatusCode::kUnavailable);
}

}  // namespace
}  // namespace drover::router
