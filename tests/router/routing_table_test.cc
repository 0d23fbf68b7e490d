#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "drover/router.h"
#include "testing/endpoints.h"

namespace drover::router {
namespace {

using testing::ReadyEndpoint;
using testing::ReadyEndpoints;

TEST(RoutingTableTest, SortsByIdSoEqualSetsGiveEqualTables) {
  auto a = RoutingTable::Create(3, {ReadyEndpoint("b"), ReadyEndpoint("a"), ReadyEndpoint("c")});
  auto b = RoutingTable::Create(3, {ReadyEndpoint("c"), ReadyEndpoint("b"), ReadyEndpoint("a")});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*a)->endpoints(), (*b)->endpoints());
  EXPECT_EQ((*a)->at(0).id, "a");
  EXPECT_EQ((*a)->version(), 3u);
  EXPECT_EQ((*a)->IndexOf("c"), 2u);
  EXPECT_EQ((*a)->IndexOf("zz"), std::nullopt);
}

TEST(RoutingTableTest, RejectsDuplicateAndEmptyIds) {
  auto dup = RoutingTable::Create(1, {ReadyEndpoint("a"), ReadyEndpoint("a")});
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("duplicate endpoint id 'a'"), std::string::npos);
  auto empty_id = RoutingTable::Create(1, {ReadyEndpoint("")});
  EXPECT_EQ(empty_id.status().code(), StatusCode::kInvalidArgument);
}

TEST(RoutingTableTest, EmptyTableIsValidAndPickersFailCleanly) {
  auto table = RoutingTable::Create(1, {});
  ASSERT_TRUE(table.ok());
  EXPECT_EQ((*table)->size(), 0u);
  EXPECT_EQ(RingHash::Build(**table).Pick(42).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(Maglev::Build(**table).Pick(42).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(ModN::Build(**table).Pick(42).status().code(), StatusCode::kUnavailable);
  Xoshiro256 random(1);
  EXPECT_EQ(P2cPicker::Build(**table).Pick({}, MonoTime{}, random).status().code(),
            StatusCode::kUnavailable);
}

TEST(PublishedTest, ReaderReloadsOnlyAfterAStore) {
  Published<int> cell(std::make_shared<const int>(1));
  Published<int>::Reader reader(cell);
  const std::shared_ptr<const int> first = reader.Current();
  EXPECT_EQ(*first, 1);
  EXPECT_EQ(reader.Current().get(), first.get());  // cached: the same object, no reload
  cell.Store(std::make_shared<const int>(2));
  EXPECT_EQ(*reader.Current(), 2);
  EXPECT_EQ(*first, 1);  // the old value lives on while someone holds it
  EXPECT_EQ(*cell.Load(), 2);
}

TEST(RouterTest, UpdatePublishesIncreasingVersions) {
  Router router;
  EXPECT_EQ(router.Snapshot()->version(), 0u);
  EXPECT_EQ(router.Snapshot()->table->size(), 0u);
  auto v1 = router.Update(ReadyEndpoints(3));
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(*v1, 1u);
  auto snapshot = router.Snapshot();
  EXPECT_EQ(snapshot->version(), 1u);
  ASSERT_TRUE(snapshot->ring.has_value());
  ASSERT_TRUE(snapshot->maglev.has_value());
  EXPECT_TRUE(snapshot->ring->Pick(HashKey("k")).ok());

  // A failed update publishes nothing and burns no version.
  auto bad = router.Update({ReadyEndpoint("x"), ReadyEndpoint("x")});
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(router.Snapshot()->version(), 1u);
  EXPECT_EQ(*router.Update(ReadyEndpoints(4)), 2u);
  // The reader's old snapshot is untouched by the new publication.
  EXPECT_EQ(snapshot->table->size(), 3u);
  EXPECT_EQ(router.Snapshot()->table->size(), 4u);
}

TEST(RouterTest, PublishKeepsTheTableVersionAndRefusesOlderTables) {
  Router router;
  ASSERT_TRUE(router.Publish(RoutingTable::Create(40, ReadyEndpoints(3)).value()).ok());
  EXPECT_EQ(router.Snapshot()->version(), 40u);
  EXPECT_TRUE(router.Snapshot()->maglev->Pick(HashKey("k")).ok());
  const Status stale = router.Publish(RoutingTable::Create(39, ReadyEndpoints(5)).value());
  EXPECT_EQ(stale.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(router.Snapshot()->table->size(), 3u);
  // More events of revision 40: the same version replaces the table.
  ASSERT_TRUE(router.Publish(RoutingTable::Create(40, ReadyEndpoints(4)).value()).ok());
  EXPECT_EQ(router.Snapshot()->table->size(), 4u);
  EXPECT_EQ(router.Publish(nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*router.Update(ReadyEndpoints(2)), 41u);  // Update continues from there
}

// Readers route continuously while the writer publishes as fast as it can. Every snapshot a
// reader sees must be internally consistent (its pickers belong to its table) and versions
// must never go backwards for a reader. Run under ASan/UBSan and TSan by the test script.
TEST(RouterTest, ConcurrentReadersDuringRapidPublishes) {
  RouterOptions options;
  options.ring.vnodes_per_weight = 16;  // keep each rebuild cheap so publishes are rapid
  options.maglev.table_size = 1009;
  Router router(options);
  constexpr int kPublishes = 400;
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> picks{0};
  std::atomic<int> failures{0};

  // Odd readers load through Snapshot(), even ones through a per-thread SnapshotReader.
  auto reader = [&](int seed) {
    Xoshiro256 random(seed);
    Router::SnapshotReader cached = router.NewReader();
    std::uint64_t last_version = 0;
    std::vector<std::uint64_t> loads;
    while (!done.load(std::memory_order_acquire)) {
      auto snap = seed % 2 == 1 ? router.Snapshot() : cached.Current();
      if (snap->version() < last_version) failures++;
      last_version = snap->version();
      const std::size_t size = snap->table->size();
      // Writer publishes version v with (v % 7) + 1 endpoints.
      if (snap->version() > 0 && size != (snap->version() % 7) + 1) failures++;
      const std::uint64_t h = random.Next();
      auto r = snap->ring->Pick(h);
      auto m = snap->maglev->Pick(h);
      loads.assign(size, 1);
      auto p = snap->p2c.Pick(loads, MonoTime{}, random);
      if (size == 0) {
        if (r.ok() || m.ok() || p.ok()) failures++;
        continue;
      }
      if (!r.ok() || *r >= size || !m.ok() || *m >= size || !p.ok() || *p >= size) failures++;
      picks.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::vector<std::jthread> readers;
  for (int i = 0; i < 4; ++i) readers.emplace_back(reader, i + 1);
  // At least kPublishes publications, and on until the readers have routed a fair amount
  // concurrently with them (bounded, so a starved reader cannot hang the test).
  std::uint64_t v = 0;
  bool updates_ok = true;
  while (updates_ok && (v < kPublishes || (picks.load() < 2000 && v < 200'000))) {
    ++v;
    updates_ok = router.Update(ReadyEndpoints((v % 7) + 1, v)).ok();
  }
  done.store(true, std::memory_order_release);
  EXPECT_TRUE(updates_ok) << "update " << v << " failed";
  readers.clear();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GE(picks.load(), 2000u);
  EXPECT_EQ(router.Snapshot()->version(), v);
}

}  // namespace
}  // namespace drover::router
