#include "drover/hot_keys.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "testing/endpoints.h"

namespace drover::router {
namespace {

// A seeded RandomSource independent of the router's own generators, so that these streams are
// the same whatever Xoshiro256 does.
class TestRandom final : public RandomSource {
 public:
  explicit TestRandom(std::uint64_t seed) : gen_(seed) {}
  std::uint64_t Next() override { return gen_(); }

 private:
  std::mt19937_64 gen_;
};

// Zipf(s) over ranks 0..n-1 by inverse CDF: P(rank k) is proportional to 1 / (k + 1)^s.
class ZipfSampler {
 public:
  ZipfSampler(std::size_t n, double s) : cdf_(n) {
    double sum = 0;
    for (std::size_t k = 0; k < n; ++k) {
      sum += 1.0 / std::pow(static_cast<double>(k + 1), s);
      cdf_[k] = sum;
    }
    for (double& c : cdf_) c /= sum;
  }

  std::size_t Sample(RandomSource& random) const {
    const double u = random.UniformDouble();
    const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
    return std::min<std::size_t>(static_cast<std::size_t>(it - cdf_.begin()), cdf_.size() - 1);
  }

 private:
  std::vector<double> cdf_;
};

using ExactCounts = std::unordered_map<std::string, std::uint64_t>;

std::uint64_t CountOf(const ExactCounts& exact, const std::string& key) {
  const auto it = exact.find(key);
  return it == exact.end() ? 0 : it->second;
}

// Checks every Space-Saving invariant of `sketch` against the exact counts of its stream.
void ExpectSpaceSavingBounds(const SpaceSaving& sketch, const ExactCounts& exact) {
  const std::vector<HeavyHitter> all = sketch.Top(sketch.capacity());
  ASSERT_EQ(all.size(), sketch.size());
  std::uint64_t sum = 0;
  std::set<std::string> monitored;
  for (const HeavyHitter& h : all) {
    const std::uint64_t truth = CountOf(exact, h.key);
    EXPECT_GE(h.count, truth) << h.key;
    EXPECT_LE(h.count - h.error, truth) << h.key;
    EXPECT_LE(h.error, sketch.total() / sketch.capacity()) << h.key;
    sum += h.count;
    monitored.insert(h.key);
  }
  EXPECT_EQ(sum, sketch.total());
  // No key above total / capacity may be missing.
  for (const auto& [key, truth] : exact) {
    if (truth * sketch.capacity() > sketch.total()) {
      EXPECT_TRUE(monitored.count(key)) << key << " occurs " << truth << " times";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// SpaceSaving

TEST(SpaceSavingTest, ExactWhenKeysFitInCapacity) {
  SpaceSaving sketch(8);
  for (int i = 0; i < 5; ++i) sketch.Add("a");
  sketch.Add("c", 3);
  sketch.Add("b", 3);
  sketch.Add("d");
  sketch.Add("ignored", 0);

  EXPECT_EQ(sketch.total(), 12u);
  EXPECT_EQ(sketch.size(), 4u);
  const std::vector<HeavyHitter> expected = {
      {"a", 5, 0, true}, {"b", 3, 0, true}, {"c", 3, 0, true}, {"d", 1, 0, true}};
  EXPECT_EQ(sketch.Top(10), expected);
  EXPECT_EQ(sketch.Top(2), std::vector<HeavyHitter>(expected.begin(), expected.begin() + 2));
  // 3/12 is not above 25%.
  EXPECT_EQ(sketch.Above(0.25), std::vector<HeavyHitter>(expected.begin(), expected.begin() + 1));
  EXPECT_EQ(sketch.Above(0.2), std::vector<HeavyHitter>(expected.begin(), expected.begin() + 3));
  EXPECT_TRUE(sketch.Above(1.0).empty());
}

TEST(SpaceSavingTest, ZeroCapacityIsClampedToOne) {
  SpaceSaving sketch(0);
  EXPECT_EQ(sketch.capacity(), 1u);
  sketch.Add("a", 3);
  sketch.Add("b");
  // "b" took over a's counter: at most 4 occurrences, at least 1, so other keys may outrank it.
  const std::vector<HeavyHitter> expected = {{"b", 4, 3, false}};
  EXPECT_EQ(sketch.Top(5), expected);
  EXPECT_EQ(sketch.total(), 4u);
}

TEST(SpaceSavingTest, EvictsTheSmallestCounter) {
  SpaceSaving sketch(3);
  sketch.Add("a", 10);
  sketch.Add("b", 2);
  sketch.Add("c", 7);
  sketch.Add("d");  // replaces b (2)
  sketch.Add("e");  // replaces d (3)
  const std::vector<HeavyHitter> expected = {
      {"a", 10, 0, true}, {"c", 7, 0, true}, {"e", 4, 3, false}};
  EXPECT_EQ(sketch.Top(3), expected);

  // total 21: "e" may exceed 15% but may also be as rare as once.
  EXPECT_EQ(sketch.Above(0.15), expected);
  EXPECT_EQ(sketch.Above(0.3), std::vector<HeavyHitter>(expected.begin(), expected.begin() + 2));
}

TEST(SpaceSavingTest, HalveRoundsCountsUpAndLowerBoundsDown) {
  SpaceSaving sketch(3);
  sketch.Add("a", 3);
  sketch.Add("b", 5);
  sketch.Add("c", 2);
  sketch.Add("d", 4);  // takes over c: count 6, error 2
  sketch.Halve();
  // True halved frequencies: a 1.5, b 2.5, d 2 (known to be in [2, 3]).
  const std::vector<HeavyHitter> expected = {
      {"b", 3, 1, true}, {"d", 3, 1, true}, {"a", 2, 1, false}};
  EXPECT_EQ(sketch.Top(3), expected);
  EXPECT_EQ(sketch.total(), 8u);

  // The heap survives halving: the next new key evicts the smallest count.
  sketch.Add("e");
  EXPECT_EQ(sketch.Top(3).back(), (HeavyHitter{"e", 3, 2, false}));
  EXPECT_EQ(sketch.total(), 9u);
}

TEST(SpaceSavingTest, BoundsHoldOnRandomStream) {
  TestRandom random(7);
  SpaceSaving sketch(50);
  ExactCounts exact;
  for (int i = 1; i <= 20000; ++i) {
    // Skewed: low ids are far more frequent, and the tail is much larger than the sketch.
    const double u = random.UniformDouble();
    const std::string key = "k" + std::to_string(static_cast<int>(2000 * u * u * u));
    const std::uint64_t weight = 1 + random.Uniform(4);
    sketch.Add(key, weight);
    exact[key] += weight;
    if (i % 2500 == 0) {
      SCOPED_TRACE(i);
      ExpectSpaceSavingBounds(sketch, exact);
    }
  }
  EXPECT_EQ(sketch.size(), 50u);

  // A guaranteed Top(n) entry is truly in the top n.
  std::vector<std::uint64_t> truths;
  for (const auto& [key, count] : exact) truths.push_back(count);
  std::sort(truths.rbegin(), truths.rend());
  constexpr std::size_t kN = 10;
  const std::vector<HeavyHitter> top = sketch.Top(kN);
  ASSERT_EQ(top.size(), kN);
  EXPECT_TRUE(top.front().guaranteed);
  for (std::size_t i = 0; i + 1 < top.size(); ++i) EXPECT_GE(top[i].count, top[i + 1].count);
  for (const HeavyHitter& h : top) {
    if (h.guaranteed) {
      EXPECT_GE(CountOf(exact, h.key), truths[kN]) << h.key;
    }
  }
}

TEST(SpaceSavingTest, FindsPlantedHotKeysInZipfStream) {
  constexpr std::size_t kDistinct = 100'000;
  constexpr int kDraws = 500'000;
  constexpr double kFraction = 0.01;
  constexpr std::size_t kCapacity = 1000;

  TestRandom random(2024);
  const ZipfSampler zipf(kDistinct, 1.1);
  // Ranks map to scattered names, so the hottest keys are not simply the first ids.
  std::vector<std::uint64_t> name_of_rank(kDistinct);
  std::iota(name_of_rank.begin(), name_of_rank.end(), 0);
  std::shuffle(name_of_rank.begin(), name_of_rank.end(), std::mt19937_64(99));

  // Planted keys on top of the Zipf background, at 5%, 3% and 1.5% of the draws.
  const std::vector<std::pair<std::string, double>> planted = {
      {"planted-a", 0.05}, {"planted-b", 0.03}, {"planted-c", 0.015}};

  SpaceSaving sketch(kCapacity);
  ExactCounts exact;
  for (int i = 0; i < kDraws; ++i) {
    double u = random.UniformDouble();
    std::string key;
    for (const auto& [name, p] : planted) {
      if (u < p) {
        key = name;
        break;
      }
      u -= p;
    }
    if (key.empty()) key = "user:" + std::to_string(name_of_rank[zipf.Sample(random)]);
    sketch.Add(key);
    ++exact[key];
  }
  ASSERT_EQ(sketch.total(), static_cast<std::uint64_t>(kDraws));
  ExpectSpaceSavingBounds(sketch, exact);

  const std::vector<HeavyHitter> hot = sketch.Above(kFraction);
  std::map<std::string, HeavyHitter> reported;
  for (const HeavyHitter& h : hot) reported.emplace(h.key, h);

  for (const auto& [name, p] : planted) {
    ASSERT_TRUE(reported.count(name)) << name;
    EXPECT_TRUE(reported.at(name).guaranteed) << name;
  }

  const double threshold = kFraction * kDraws;
  int truly_hot = 0;
  for (const auto& [key, truth] : exact) {
    if (static_cast<double>(truth) > threshold) {
      ++truly_hot;
      EXPECT_TRUE(reported.count(key)) << key << " carries " << truth << " of " << kDraws;
    }
  }
  // Zipf(1.1) over 100k keys puts about ten ranks above 1%, plus the planted three.
  EXPECT_GE(truly_hot, 8);

  for (const HeavyHitter& h : hot) {
    const auto truth = static_cast<double>(CountOf(exact, h.key));
    // No false "guaranteed", and false positives sit within the error bound (total / capacity).
    if (h.guaranteed) {
      EXPECT_GT(truth, threshold) << h.key;
    }
    EXPECT_GT(truth, threshold - static_cast<double>(kDraws) / kCapacity) << h.key;
  }
}

TEST(SpaceSavingTest, HalveKeepsBoundsAgainstDecayedCounts) {
  TestRandom random(11);
  SpaceSaving sketch(20);
  std::unordered_map<std::string, double> decayed;  // exact, halved with the sketch
  for (int round = 0; round < 6; ++round) {
    for (int i = 0; i < 3000; ++i) {
      const double u = random.UniformDouble();
      // The hot region moves every round, so decay has something to forget.
      const std::string key =
          "k" + std::to_string(round * 7 + static_cast<int>(300 * u * u * u * u));
      sketch.Add(key);
      decayed[key] += 1;
    }
    sketch.Halve();
    for (auto& [key, count] : decayed) count /= 2;

    SCOPED_TRACE(round);
    std::uint64_t sum = 0;
    std::uint64_t min_count = UINT64_MAX;
    std::set<std::string> monitored;
    for (const HeavyHitter& h : sketch.Top(sketch.capacity())) {
      const double truth = decayed.count(h.key) ? decayed.at(h.key) : 0.0;
      EXPECT_GE(static_cast<double>(h.count), truth) << h.key;
      EXPECT_LE(static_cast<double>(h.count - h.error), truth) << h.key;
      sum += h.count;
      min_count = std::min(min_count, h.count);
      monitored.insert(h.key);
    }
    EXPECT_EQ(sum, sketch.total());
    for (const auto& [key, truth] : decayed) {
      if (!monitored.count(key)) {
        EXPECT_LE(truth, static_cast<double>(min_count)) << key;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// HotKeyDetector

// Records `n` keys of which `hot_share` are `hot` and the rest spread over 1000 cold keys.
void RecordMix(HotKeyDetector& detector, const std::string& hot, double hot_share, int n,
               RandomSource& random) {
  for (int i = 0; i < n; ++i) {
    if (random.UniformDouble() < hot_share) {
      detector.Record(hot);
    } else {
      detector.Record("cold" + std::to_string(random.Uniform(1000)));
    }
  }
}

bool Contains(const std::vector<HeavyHitter>& hitters, const std::string& key) {
  return std::any_of(hitters.begin(), hitters.end(),
                     [&](const HeavyHitter& h) { return h.key == key; });
}

TEST(HotKeyDetectorTest, FindsHotKeyAndResetStartsNewWindow) {
  TestRandom random(3);
  HotKeyDetector detector({.capacity = 100});
  RecordMix(detector, "hot", 0.3, 10000, random);
  EXPECT_EQ(detector.total(), 10000u);
  const std::vector<HeavyHitter> hot = detector.HotKeys(0.1);
  ASSERT_EQ(hot.size(), 1u);
  EXPECT_EQ(hot[0].key, "hot");
  EXPECT_TRUE(hot[0].guaranteed);

  detector.Reset();
  EXPECT_EQ(detector.total(), 0u);
  EXPECT_TRUE(detector.HotKeys(0.1).empty());
}

TEST(HotKeyDetectorTest, DecayForgetsKeysThatCooledDown) {
  TestRandom random(5);
  HotKeyDetector decaying({.capacity = 100, .halve_every = 1000});
  HotKeyDetector window({.capacity = 100});
  for (HotKeyDetector* detector : {&decaying, &window}) {
    RecordMix(*detector, "old", 0.5, 10000, random);
    RecordMix(*detector, "new", 0.5, 10000, random);
  }
  // Without decay "old" still holds a quarter of the window.
  EXPECT_TRUE(Contains(window.HotKeys(0.2), "old"));
  EXPECT_TRUE(Contains(window.HotKeys(0.2), "new"));
  // With a half-life of 1000 records, 10000 records later it weighs about 2^-10 of that.
  EXPECT_FALSE(Contains(decaying.HotKeys(0.2), "old"));
  EXPECT_TRUE(Contains(decaying.HotKeys(0.2), "new"));
  EXPECT_LT(decaying.total(), 2100u);
}

TEST(HotKeyDetectorTest, ConcurrentRecordsAreAllCounted) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  HotKeyDetector detector({.capacity = 64});
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&detector, t] {
      for (int i = 0; i < kPerThread; ++i) {
        detector.Record(i % 4 == 0 ? std::string("hot")
                                   : "t" + std::to_string(t) + "-" + std::to_string(i % 500));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(detector.total(), static_cast<std::uint64_t>(kThreads * kPerThread));
  const std::vector<HeavyHitter> hot = detector.HotKeys(0.2);
  ASSERT_EQ(hot.size(), 1u);
  EXPECT_EQ(hot[0].key, "hot");
  EXPECT_GE(hot[0].count, static_cast<std::uint64_t>(kThreads * kPerThread / 4));
  EXPECT_TRUE(hot[0].guaranteed);
}

// ---------------------------------------------------------------------------------------------
// HotKeySpreader

TEST(HotKeySpreaderTest, HotKeysFanOutColdKeysStay) {
  const HotKeySpreader spreader({"hot", "also-hot"}, 4);
  EXPECT_EQ(spreader.replicas(), 4u);
  EXPECT_EQ(spreader.size(), 2u);
  EXPECT_TRUE(spreader.IsHot("hot"));
  EXPECT_FALSE(spreader.IsHot("cold"));
  EXPECT_FALSE(spreader.IsHot("hot#0"));

  EXPECT_EQ(spreader.WriteKeys("hot"),
            (std::vector<std::string>{"hot#0", "hot#1", "hot#2", "hot#3"}));
  EXPECT_EQ(spreader.WriteKeys("cold"), std::vector<std::string>{"cold"});

  TestRandom random(17);
  constexpr int kDraws = 40000;
  std::map<std::string, int> reads;
  for (int i = 0; i < kDraws; ++i) {
    ++reads[spreader.ReadKey("hot", random)];
    EXPECT_EQ(spreader.ReadKey("cold", random), "cold");
  }
  ASSERT_EQ(reads.size(), 4u);
  for (const auto& [key, n] : reads) {
    EXPECT_TRUE(key == "hot#0" || key == "hot#1" || key == "hot#2" || key == "hot#3") << key;
    // Expected 10000 each; 5 sigma is about 430.
    EXPECT_NEAR(n, kDraws / 4, 600) << key;
  }
}

TEST(HotKeySpreaderTest, OneReplicaSpreadsNothing) {
  for (std::uint32_t replicas : {0u, 1u}) {
    const HotKeySpreader spreader({"hot"}, replicas);
    EXPECT_EQ(spreader.replicas(), 1u);
    EXPECT_FALSE(spreader.IsHot("hot"));
    EXPECT_EQ(spreader.WriteKeys("hot"), std::vector<std::string>{"hot"});
    TestRandom random(1);
    EXPECT_EQ(spreader.ReadKey("hot", random), "hot");
  }
  const HotKeySpreader none;
  EXPECT_EQ(none.replicas(), 1u);
  EXPECT_FALSE(none.IsHot(""));
}

TEST(HotKeySpreaderTest, BuiltFromDetectorOutput) {
  SpaceSaving sketch(16);
  sketch.Add("x", 50);
  sketch.Add("y", 30);
  sketch.Add("z", 20);
  const HotKeySpreader spreader = HotKeySpreader::FromHeavyHitters(sketch.Above(0.25), 3);
  EXPECT_TRUE(spreader.IsHot("x"));
  EXPECT_TRUE(spreader.IsHot("y"));
  EXPECT_FALSE(spreader.IsHot("z"));
  EXPECT_EQ(spreader.WriteKeys("y"), (std::vector<std::string>{"y#0", "y#1", "y#2"}));
}

TEST(HotKeySpreaderTest, SubKeysLandOnSeveralOwners) {
  constexpr std::uint64_t kOwners = 64;  // HashKey % 64 stands in for the ring's owner function
  constexpr std::uint32_t kReplicas = 4;
  std::vector<std::string> hot;
  for (int i = 0; i < 50; ++i) hot.push_back("hot-key-" + std::to_string(i));
  const HotKeySpreader spreader(hot, kReplicas);

  std::size_t total_owners = 0;
  for (const std::string& key : hot) {
    std::set<std::uint64_t> owners;
    for (const std::string& sub : spreader.WriteKeys(key)) owners.insert(HashKey(sub) % kOwners);
    EXPECT_GT(owners.size(), 1u) << key;
    total_owners += owners.size();
  }
  // Four sub-keys over 64 owners collide rarely: on average about 3.9 distinct owners.
  EXPECT_GT(static_cast<double>(total_owners) / static_cast<double>(hot.size()), 3.5);
}

// PickRanked walks the picker's own probe order: rank 0 is Pick(), rank 1 the owner a key's
// traffic goes to without it, each rank a distinct owner -- for Maglev and for the ring.
TEST(PickRankedTest, RanksAreTheProbeOrderDistinctOwners) {
  for (const bool maglev : {true, false}) {
    RouterOptions options;
    options.build_maglev = maglev;
    Router router(options);
    ASSERT_TRUE(router.Update(testing::ReadyEndpoints(5)).ok());
    const auto snapshot = router.Snapshot();
    for (int k = 0; k < 200; ++k) {
      const std::uint64_t h = HashKey("key-" + std::to_string(k));
      const Result<std::size_t> own = maglev ? snapshot->maglev->Pick(h) : snapshot->ring->Pick(h);
      ASSERT_TRUE(own.ok());
      EXPECT_EQ(*PickRanked(*snapshot, h, 0), *own);
      std::set<std::size_t> owners;
      for (std::uint32_t r = 0; r < 5; ++r) owners.insert(*PickRanked(*snapshot, h, r));
      EXPECT_EQ(owners.size(), 5u) << "maglev " << maglev << " key " << k;
      // Past the members: the last one stands.
      EXPECT_EQ(*PickRanked(*snapshot, h, 9), *PickRanked(*snapshot, h, 4));
    }
  }
}

TEST(HotKeyRoutingTest, AKeyOverTheFractionIsSpreadOverItsOwnersAndColdKeysKeepOne) {
  HotKeyPolicy policy;
  policy.fraction = 0.05;
  policy.owners = 3;
  policy.min_traffic = 1000;
  HotKeyRouting routing(policy);
  ASSERT_TRUE(routing.enabled());
  Xoshiro256 random(7);
  // Too little traffic yet: nothing is hot.
  for (int i = 0; i < 500; ++i) routing.Record("boss");
  routing.Refresh();
  EXPECT_TRUE(routing.Hot().empty());
  // "boss" carries about a third of the traffic, the rest is spread over 1,000 keys.
  for (int i = 0; i < 3000; ++i) {
    routing.Record(i % 3 == 0 ? std::string("boss") : "k" + std::to_string(i % 1000));
  }
  routing.Refresh();
  const std::vector<HotKey> hot = routing.Hot();
  ASSERT_EQ(hot.size(), 1u);
  EXPECT_EQ(hot[0].key, "boss");
  EXPECT_EQ(hot[0].hash, HashKey("boss"));
  EXPECT_GT(hot[0].share, 0.3);
  std::map<std::uint32_t, int> ranks;
  for (int i = 0; i < 3000; ++i) ++ranks[routing.Rank(HashKey("boss"), 5, random)];
  ASSERT_EQ(ranks.size(), 3u);  // 0, 1, 2: about a third each
  for (const auto& [rank, count] : ranks) EXPECT_NEAR(count, 1000, 150) << rank;
  EXPECT_EQ(routing.Rank(HashKey("k1"), 5, random), 0u);

  HotKeyRouting off;  // fraction 0: nothing recorded, nothing hot
  EXPECT_FALSE(off.enabled());
  for (int i = 0; i < 5000; ++i) off.Record("boss");
  off.Refresh();
  EXPECT_TRUE(off.Hot().empty());
  EXPECT_EQ(off.Rank(HashKey("boss"), 5, random), 0u);
}

}  // namespace
}  // namespace drover::router
