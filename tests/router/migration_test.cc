// Staged key migration (drover/router/migration.h): which keys move when a sixth owner joins, in
// which step, and what a key's owner and previous owner are during the move.
#include "drover/router/migration.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "drover/router/hash.h"

namespace drover::router {
namespace {

std::vector<Endpoint> Ready(int from, int to) {
  std::vector<Endpoint> out;
  for (int i = from; i < to; ++i) {
    Endpoint e;
    e.id = "s" + std::to_string(i);
    e.address = "10.0.0." + std::to_string(i + 1) + ":7000";
    e.state = EndpointState::kReady;
    out.push_back(e);
  }
  return out;
}

std::shared_ptr<const RouterSnapshot> SnapshotOf(std::vector<Endpoint> endpoints, bool maglev) {
  RouterOptions options;
  options.build_maglev = maglev;
  Router router(options);
  EXPECT_TRUE(router.Update(std::move(endpoints)).ok());
  return router.Snapshot();
}

TEST(KeyMigrationTest, AJoiningOwnerTakesAboutASixthOfTheKeysInEvenSteps) {
  constexpr int kKeys = 20'000;
  constexpr std::uint32_t kSteps = 4;
  for (const bool maglev : {true, false}) {
    const auto from = SnapshotOf(Ready(0, 5), maglev);
    const auto to = SnapshotOf(Ready(0, 6), maglev);
    const KeyMigration migration(from, to, kSteps);
    int moving = 0;
    int between_old = 0;
    std::map<std::uint32_t, int> moved_at;
    for (int k = 0; k < kKeys; ++k) {
      const std::uint64_t h = HashKey("key-" + std::to_string(k));
      const std::string before = from->table->at(*KeyOwner(*from, h)).id;
      const std::string after = to->table->at(*KeyOwner(*to, h)).id;
      const auto start = migration.Owner(h, 0).value();
      const auto end = migration.Owner(h, kSteps).value();
      EXPECT_EQ(to->table->at(start.owner).id, before);  // step 0: where it was
      EXPECT_EQ(to->table->at(end.owner).id, after);     // last step: where it goes
      if (before == after) {
        EXPECT_FALSE(end.moving);
        continue;
      }
      ++moving;
      if (after != "s5") ++between_old;  // Maglev's near-minimal disruption moves a few more
      const std::uint32_t step = migration.StepOf(h);
      ++moved_at[step];
      // Before its step the key stays and has no previous owner; from it on, the new owner knows
      // whom it takes the key over from.
      const auto waiting = migration.Owner(h, step - 1).value();
      EXPECT_EQ(to->table->at(waiting.owner).id, before);
      EXPECT_FALSE(waiting.previous.has_value());
      const auto moved = migration.Owner(h, step).value();
      EXPECT_EQ(to->table->at(moved.owner).id, after);
      ASSERT_TRUE(moved.previous.has_value());
      EXPECT_EQ(to->table->at(*moved.previous).id, before);
    }
    const double share = static_cast<double>(moving) / kKeys;
    std::printf("%s: %.4f of the keys move (ideal %.4f; %d between old owners); per step:",
                maglev ? "maglev" : "ring", share, 1.0 / 6, between_old);
    for (const auto& [step, n] : moved_at) std::printf(" %d", n);
    std::printf("\n");
    EXPECT_LE(share, 1.1 / 6) << (maglev ? "maglev" : "ring");
    EXPECT_LE(between_old, kKeys / 100) << "keys moving between the old owners";
    ASSERT_EQ(moved_at.size(), kSteps);
    for (const auto& [step, n] : moved_at) EXPECT_NEAR(n, moving / 4.0, moving * 0.05) << step;
  }
}

TEST(KeyMigrationTest, KeysOfAnOwnerThatLeftMoveAtOnceFromNowhere) {
  const auto from = SnapshotOf(Ready(0, 5), true);
  const auto to = SnapshotOf(Ready(0, 4), true);  // s4 left
  const KeyMigration migration(from, to, 4);
  int orphans = 0;
  for (int k = 0; k < 2000; ++k) {
    const std::uint64_t h = HashKey("key-" + std::to_string(k));
    if (from->table->at(*KeyOwner(*from, h)).id != "s4") continue;
    ++orphans;
    const auto owners = migration.Owner(h, 0).value();
    EXPECT_TRUE(owners.moving);
    EXPECT_EQ(owners.owner, *KeyOwner(*to, h));  // at step 0 already
    EXPECT_FALSE(owners.previous.has_value());   // nobody to hand off from
  }
  EXPECT_GT(orphans, 200);
}

}  // namespace
}  // namespace drover::router
