#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "drover/router.h"
#include "testing/endpoints.h"

namespace drover::router {
namespace {

using testing::KeyHashes;
using testing::ReadyEndpoint;
using testing::ReadyEndpoints;
using testing::Table;

double MaxShareOverFair(const std::vector<double>& shares, std::size_t members) {
  return *std::max_element(shares.begin(), shares.end()) * static_cast<double>(members);
}

TEST(RingHashTest, OneEndpointOwnsEverything) {
  auto table = Table({ReadyEndpoint("solo")});
  RingHash ring = RingHash::Build(*table);
  EXPECT_EQ(ring.points(), 256u);
  for (std::uint64_t h : KeyHashes(1000)) EXPECT_EQ(*ring.Pick(h), 0u);
  EXPECT_DOUBLE_EQ(ring.Shares()[0], 1.0);
}

TEST(RingHashTest, SharesSumToOneAndAreBalancedWith256Vnodes) {
  auto table = Table(ReadyEndpoints(100));
  RingHash ring = RingHash::Build(*table);
  auto shares = ring.Shares();
  EXPECT_NEAR(std::accumulate(shares.begin(), shares.end(), 0.0), 1.0, 1e-9);
  EXPECT_LE(MaxShareOverFair(shares, 100), 1.25);
}

TEST(RingHashTest, SampledKeysFollowExactShares) {
  auto table = Table(ReadyEndpoints(20));
  RingHash ring = RingHash::Build(*table);
  auto shares = ring.Shares();
  std::vector<double> counts(20, 0);
  auto hashes = KeyHashes(200'000);
  for (std::uint64_t h : hashes) counts[*ring.Pick(h)] += 1;
  for (std::size_t i = 0; i < 20; ++i) {
    EXPECT_NEAR(counts[i] / hashes.size(), shares[i], 0.005) << "endpoint " << i;
  }
}

TEST(RingHashTest, AddingOneEndpointMovesOnlyItsShare) {
  auto before_table = Table(ReadyEndpoints(100));
  auto after_table = Table(ReadyEndpoints(101));
  RingHash before = RingHash::Build(*before_table);
  RingHash after = RingHash::Build(*after_table);
  const std::size_t newcomer = *after_table->IndexOf("node-100");
  std::size_t moved = 0;
  auto hashes = KeyHashes(300'000);
  for (std::uint64_t h : hashes) {
    const std::string& a = before_table->at(*before.Pick(h)).id;
    const std::size_t b = *after.Pick(h);
    if (a != after_table->at(b).id) {
      ++moved;
      EXPECT_EQ(b, newcomer) << "a key moved between two old endpoints";
    }
  }
  const double ratio = static_cast<double>(moved) / hashes.size() * 101;
  EXPECT_LE(ratio, 1.25);
  EXPECT_GE(ratio, 0.75);
}

TEST(RingHashTest, RemovingOneEndpointMovesOnlyItsKeys) {
  auto before_table = Table(ReadyEndpoints(50));
  std::vector<Endpoint> rest = ReadyEndpoints(50);
  rest.erase(rest.begin() + 7);
  auto after_table = Table(rest);
  RingHash before = RingHash::Build(*before_table);
  RingHash after = RingHash::Build(*after_table);
  for (std::uint64_t h : KeyHashes(100'000)) {
    const std::string& a = before_table->at(*before.Pick(h)).id;
    const std::string& b = after_table->at(*after.Pick(h)).id;
    if (a != "node-7") {
      EXPECT_EQ(a, b);
    }
  }
}

TEST(RingHashTest, WeightsAreRespected) {
  auto table = Table({ReadyEndpoint("light", 1), ReadyEndpoint("heavy", 3)});
  RingHash ring = RingHash::Build(*table);
  EXPECT_EQ(ring.points(), 4u * 256);
  auto shares = ring.Shares();
  EXPECT_NEAR(shares[*table->IndexOf("heavy")], 0.75, 0.05);
  EXPECT_EQ(ring.total_weight(), 4u);
}

TEST(RingHashTest, OnlyReadyEndpointsWithWeightAreMembers) {
  std::vector<Endpoint> endpoints = ReadyEndpoints(4);
  endpoints[0].state = EndpointState::kStarting;
  endpoints[1].state = EndpointState::kDraining;
  endpoints[2].weight = 0;
  auto table = Table(endpoints);
  RingHash ring = RingHash::Build(*table);
  EXPECT_EQ(ring.members(), 1u);
  for (std::uint64_t h : KeyHashes(1000)) EXPECT_EQ(*ring.Pick(h), 3u);

  for (auto& e : endpoints) e.state = EndpointState::kStarting;
  EXPECT_EQ(RingHash::Build(*Table(endpoints)).Pick(1).status().code(), StatusCode::kUnavailable);
}

TEST(RingHashTest, NotAcceptingOwnerPassesKeyToSuccessor) {
  std::vector<Endpoint> endpoints = ReadyEndpoints(5);
  auto open_table = Table(endpoints);
  endpoints[2].accepting = false;  // "zone full"
  auto full_table = Table(endpoints);
  RingHash open = RingHash::Build(*open_table);
  RingHash full = RingHash::Build(*full_table);
  EXPECT_EQ(full.members(), 5u);  // still a member: keys return when it accepts again
  for (std::uint64_t h : KeyHashes(5000)) {
    const std::size_t before = *open.Pick(h);
    const std::size_t after = *full.Pick(h);
    EXPECT_NE(after, 2u);
    if (before != 2) {
      EXPECT_EQ(before, after);
    }
  }
  for (auto& e : endpoints) e.accepting = false;
  EXPECT_EQ(RingHash::Build(*Table(endpoints)).Pick(1).status().code(), StatusCode::kUnavailable);
}

TEST(RingHashTest, DeterministicAcrossBuildsAndInputOrder) {
  std::vector<Endpoint> endpoints = ReadyEndpoints(30);
  std::vector<Endpoint> reversed(endpoints.rbegin(), endpoints.rend());
  RingHash a = RingHash::Build(*Table(endpoints));
  RingHash b = RingHash::Build(*Table(reversed));
  for (std::uint64_t h : KeyHashes(10'000)) EXPECT_EQ(*a.Pick(h), *b.Pick(h));
}

TEST(RingHashTest, ExtremeHashesWrapAround) {
  auto table = Table(ReadyEndpoints(3));
  RingHash ring = RingHash::Build(*table);
  EXPECT_TRUE(ring.Pick(0).ok());
  EXPECT_TRUE(ring.Pick(~std::uint64_t{0}).ok());
  // Past the last point a key belongs to the first point's owner.
  EXPECT_EQ(*ring.Pick(~std::uint64_t{0}), *ring.Pick(0));
}

// The prefix-indexed lookup must agree exactly with a lower_bound over the sorted points, with
// wrap-around, for every hash -- including each point's own hash, its neighbours and both ends.
TEST(RingHashTest, LookupMatchesLowerBoundReference) {
  for (std::uint32_t vnodes : {1u, 3u, 64u}) {
    for (std::size_t members : {1u, 2u, 37u}) {
      RingHashOptions options;
      options.vnodes_per_weight = vnodes;
      auto table = Table(ReadyEndpoints(members));
      RingHash ring = RingHash::Build(*table, options);
      std::vector<std::uint64_t> hashes;
      for (std::size_t i = 0; i < ring.points(); ++i) hashes.push_back(ring.point_hash(i));
      ASSERT_TRUE(std::is_sorted(hashes.begin(), hashes.end()));
      auto reference = [&](std::uint64_t h) {
        auto it = std::lower_bound(hashes.begin(), hashes.end(), h);
        const std::size_t i = it == hashes.end() ? 0 : it - hashes.begin();
        return static_cast<std::size_t>(ring.point_owner(i));
      };
      std::vector<std::uint64_t> probes = {0, 1, ~std::uint64_t{0}, ~std::uint64_t{0} - 1};
      for (std::uint64_t h : hashes) {
        probes.insert(probes.end(), {h - 1, h, h + 1});
      }
      Xoshiro256 random(vnodes * 1000 + members);
      for (int i = 0; i < 2000; ++i) probes.push_back(random.Next());
      for (std::uint64_t h : probes) {
        ASSERT_EQ(*ring.Pick(h), reference(h)) << "hash " << h << " vnodes " << vnodes;
      }
    }
  }
}

TEST(RingHashTest, MaxPointsScalesLargeWeightsDown) {
  RingHashOptions options;
  options.max_points = 1000;
  auto table = Table({ReadyEndpoint("a", 1000), ReadyEndpoint("b", 3000)});
  RingHash ring = RingHash::Build(*table, options);
  EXPECT_LE(ring.points(), 1000u);
  EXPECT_NEAR(ring.Shares()[*table->IndexOf("b")], 0.75, 0.1);
}

}  // namespace
}  // namespace drover::router
