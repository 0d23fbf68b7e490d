#include <gtest/gtest.h>

#include <algorithm>

#include "drover/router.h"
#include "testing/endpoints.h"

namespace drover::router {
namespace {

using testing::KeyHashes;
using testing::ReadyEndpoint;
using testing::ReadyEndpoints;
using testing::Table;

TEST(NextPrimeTest, FindsSmallestPrimeAtOrAbove) {
  EXPECT_EQ(NextPrime(0), 2u);
  EXPECT_EQ(NextPrime(2), 2u);
  EXPECT_EQ(NextPrime(14), 17u);
  EXPECT_EQ(NextPrime(65537), 65537u);
  EXPECT_EQ(NextPrime(100000), 100003u);
}

TEST(MaglevTest, TableSizeFollowsThePrimeLadder) {
  EXPECT_EQ(Maglev::Build(*Table(ReadyEndpoints(3))).table_size(), 65537u);
  // 2500 entries per member: 250000 wanted, the first ladder prime above it is 262147.
  EXPECT_EQ(Maglev::Build(*Table(ReadyEndpoints(100))).table_size(), 262147u);
  MaglevOptions paper;
  paper.entries_per_member = 100;
  EXPECT_EQ(Maglev::Build(*Table(ReadyEndpoints(1000)), paper).table_size(), 131101u);
  MaglevOptions fixed;
  fixed.table_size = 1000;
  EXPECT_EQ(Maglev::Build(*Table(ReadyEndpoints(3)), fixed).table_size(), 1009u);
  MaglevOptions capped;
  capped.max_table_size = 70000;
  EXPECT_EQ(Maglev::Build(*Table(ReadyEndpoints(100)), capped).table_size(), NextPrime(70000));
}

TEST(MaglevTest, TableSizeIsStableAcrossSmallMembershipChanges) {
  // A new M remaps nearly every key, so M may only change when membership doubles.
  const MaglevOptions options;
  for (std::size_t n = 90; n <= 104; ++n) {
    EXPECT_EQ(MaglevTableSize(n, options), 262147u) << n << " members";
  }
  EXPECT_EQ(MaglevTableSize(105, options), 524309u);
}

TEST(MaglevTest, EvenSharesWithinTwoPercent) {
  auto table = Table(ReadyEndpoints(100));
  Maglev maglev = Maglev::Build(*table);
  auto shares = maglev.Shares();
  const double peak = *std::max_element(shares.begin(), shares.end());
  EXPECT_LE(peak * 100, 1.02);
}

TEST(MaglevTest, OneEndpointOwnsEverything) {
  Maglev maglev = Maglev::Build(*Table({ReadyEndpoint("solo")}));
  for (std::uint64_t h : KeyHashes(1000)) EXPECT_EQ(*maglev.Pick(h), 0u);
  EXPECT_TRUE(maglev.Pick(~std::uint64_t{0}).ok());
}

TEST(MaglevTest, MovementOnAddAndRemoveIsNearIdeal) {
  auto base = Table(ReadyEndpoints(100));
  auto grown = Table(ReadyEndpoints(101));
  std::vector<Endpoint> rest = ReadyEndpoints(100);
  rest.erase(rest.begin() + 40);
  auto shrunk = Table(rest);
  Maglev m0 = Maglev::Build(*base);
  Maglev m_add = Maglev::Build(*grown);
  Maglev m_remove = Maglev::Build(*shrunk);
  std::size_t moved_add = 0, moved_remove = 0;
  auto hashes = KeyHashes(300'000);
  for (std::uint64_t h : hashes) {
    const std::string& owner = base->at(*m0.Pick(h)).id;
    moved_add += owner != grown->at(*m_add.Pick(h)).id;
    moved_remove += owner != shrunk->at(*m_remove.Pick(h)).id;
  }
  EXPECT_LE(static_cast<double>(moved_add) / hashes.size() * 101, 1.30);
  EXPECT_LE(static_cast<double>(moved_remove) / hashes.size() * 100, 1.30);
}

TEST(MaglevTest, WeightsAreRespected) {
  auto table = Table({ReadyEndpoint("a", 1), ReadyEndpoint("b", 2), ReadyEndpoint("c", 5)});
  auto shares = Maglev::Build(*table).Shares();
  EXPECT_NEAR(shares[0], 1.0 / 8, 0.005);
  EXPECT_NEAR(shares[1], 2.0 / 8, 0.005);
  EXPECT_NEAR(shares[2], 5.0 / 8, 0.005);
}

TEST(MaglevTest, ExcludesNonReadyAndSkipsNotAccepting) {
  std::vector<Endpoint> endpoints = ReadyEndpoints(6);
  endpoints[0].state = EndpointState::kDraining;
  endpoints[1].state = EndpointState::kStarting;
  endpoints[2].accepting = false;
  auto table = Table(endpoints);
  Maglev maglev = Maglev::Build(*table);
  EXPECT_EQ(maglev.members(), 4u);
  EXPECT_EQ(maglev.Shares()[0], 0.0);
  for (std::uint64_t h : KeyHashes(5000)) {
    const std::size_t i = *maglev.Pick(h);
    EXPECT_GE(i, 3u);
  }
}

TEST(MaglevTest, NoMembersGivesZeroSharesAndACleanError) {
  std::vector<Endpoint> endpoints = ReadyEndpoints(3);
  for (auto& e : endpoints) e.state = EndpointState::kStarting;
  Maglev maglev = Maglev::Build(*Table(endpoints));
  EXPECT_EQ(maglev.Shares(), std::vector<double>(3, 0.0));
  EXPECT_EQ(maglev.Pick(7).status().code(), StatusCode::kUnavailable);
}

TEST(MaglevTest, SkewedWeightsBuildProportionalShares) {
  // One member 1000 times heavier than the rest: every turn fills a slot, so this stays cheap.
  std::vector<Endpoint> endpoints = ReadyEndpoints(50);
  endpoints[0].weight = 1000;
  auto table = Table(endpoints);
  auto shares = Maglev::Build(*table).Shares();
  EXPECT_NEAR(shares[*table->IndexOf("node-0")], 1000.0 / 1049, 0.001);
  EXPECT_NEAR(shares[*table->IndexOf("node-1")], 1.0 / 1049, 0.0002);
}

TEST(MaglevTest, ExplicitTableSizeIsBounded) {
  MaglevOptions huge;
  huge.table_size = std::uint64_t{1} << 62;
  EXPECT_EQ(MaglevTableSize(3, huge), NextPrime(std::uint64_t{1} << 22));
  MaglevOptions many;
  many.entries_per_member = std::uint64_t{1} << 60;
  EXPECT_EQ(MaglevTableSize(1000, many), NextPrime(std::uint64_t{1} << 22));
}

TEST(MaglevTest, DeterministicAcrossBuilds) {
  auto a = Maglev::Build(*Table(ReadyEndpoints(25)));
  auto b = Maglev::Build(*Table(ReadyEndpoints(25)));
  for (std::uint64_t h : KeyHashes(10'000)) EXPECT_EQ(*a.Pick(h), *b.Pick(h));
}

TEST(ModNTest, BaselineMovesAlmostEverythingAndNeverDividesByZero) {
  auto base = Table(ReadyEndpoints(4));
  auto grown = Table(ReadyEndpoints(5));
  ModN m4 = ModN::Build(*base);
  ModN m5 = ModN::Build(*grown);
  std::size_t moved = 0;
  auto hashes = KeyHashes(100'000);
  for (std::uint64_t h : hashes) moved += base->at(*m4.Pick(h)).id != grown->at(*m5.Pick(h)).id;
  // The seed's incident: 4 -> 5 shards moved about 80% of keys.
  EXPECT_NEAR(static_cast<double>(moved) / hashes.size(), 0.8, 0.01);
  EXPECT_EQ(ModN::Build(*Table({})).Pick(5).status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace drover::router
