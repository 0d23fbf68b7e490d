#include "sdk/service_view.h"

#include <gtest/gtest.h>

namespace drover::sdk {
namespace {

router::Endpoint Member(const std::string& id, std::uint64_t generation,
                        router::EndpointState state = router::EndpointState::kReady) {
  router::Endpoint e;
  e.id = id;
  e.address = "127.0.0.1:" + std::to_string(9000 + id.size());
  e.generation = generation;
  e.state = state;
  return e;
}

std::vector<std::string> Ids(const ServiceView& view) {
  std::vector<std::string> ids;
  const auto table = view.Table().value();  // held: a range-for would not keep it alive
  for (const auto& e : table->endpoints()) ids.push_back(e.id);
  return ids;
}

TEST(ServiceViewTest, PutsAndDeletesBuildTheTableAtTheirRevision) {
  ServiceView view("zone");
  EXPECT_EQ(view.Put(Member("a", 1), 1), Applied::kApplied);
  EXPECT_EQ(view.Put(Member("b", 1), 2), Applied::kApplied);
  EXPECT_EQ(view.Delete("a", 1, 3), Applied::kApplied);
  auto table = view.Table();
  ASSERT_TRUE(table.ok());
  EXPECT_EQ((*table)->version(), 3u);
  EXPECT_EQ(Ids(view), std::vector<std::string>{"b"});
  EXPECT_EQ(view.Put(Member("c", 1), 2), Applied::kStale);  // older than the view
  EXPECT_EQ(view.size(), 1u);
}

TEST(ServiceViewTest, LowerGenerationNeverReplacesOrRemovesANewerIncarnation) {
  ServiceView view("zone");
  ASSERT_EQ(view.Put(Member("a", 5), 10), Applied::kApplied);
  EXPECT_EQ(view.Put(Member("a", 4, router::EndpointState::kDraining), 11), Applied::kStale);
  EXPECT_EQ(view.Delete("a", 4, 12), Applied::kStale);
  ASSERT_EQ(view.size(), 1u);
  EXPECT_EQ(view.Table().value()->at(0).generation, 5u);
  EXPECT_EQ(view.Table().value()->at(0).state, router::EndpointState::kReady);
  // A fence is a DELETE of the old and a PUT of the new generation at one revision.
  EXPECT_EQ(view.Delete("a", 5, 13), Applied::kApplied);
  EXPECT_EQ(view.Put(Member("a", 6), 13), Applied::kApplied);
  EXPECT_EQ(view.Table().value()->at(0).generation, 6u);
}

TEST(ServiceViewTest, EmptyOrShrunkSnapshotNeedsASecondRead) {
  ServiceView view("zone", ServiceViewOptions{.max_drop_fraction = 0.5});
  ASSERT_EQ(
      view.Replace({Member("a", 1), Member("b", 1), Member("c", 1), Member("d", 1)}, 5, false),
      Applied::kApplied);  // from nothing: nothing to lose
  // An empty answer does not wipe the view on its own word.
  EXPECT_EQ(view.Replace({}, 6, false), Applied::kNeedsConfirmation);
  EXPECT_TRUE(view.awaiting_confirmation());
  EXPECT_EQ(view.size(), 4u);
  EXPECT_EQ(view.revision(), 5u);
  // Losing 3 of 4 (more than half) is held too; losing 2 of 4 is not.
  EXPECT_EQ(view.Replace({Member("a", 1)}, 6, false), Applied::kNeedsConfirmation);
  EXPECT_EQ(view.Replace({Member("a", 1), Member("b", 1), Member("e", 1)}, 6, false),
            Applied::kApplied);
  EXPECT_FALSE(view.awaiting_confirmation());
  EXPECT_EQ(Ids(view), (std::vector<std::string>{"a", "b", "e"}));
  // The confirming read applies even an empty service: it really is empty.
  ASSERT_EQ(view.Replace({}, 7, false), Applied::kNeedsConfirmation);
  EXPECT_EQ(view.Replace({}, 7, true), Applied::kApplied);
  EXPECT_EQ(view.size(), 0u);
  EXPECT_EQ(view.Table().value()->version(), 7u);
}

TEST(ServiceViewTest, SnapshotsAndProgressOnlyMoveForward) {
  ServiceView view("zone");
  ASSERT_EQ(view.Replace({Member("a", 1)}, 9, false), Applied::kApplied);
  EXPECT_EQ(view.Replace({Member("b", 1)}, 8, true), Applied::kStale);
  view.Progress(7);
  EXPECT_EQ(view.revision(), 9u);
  view.Progress(12);
  EXPECT_EQ(view.revision(), 12u);
  EXPECT_EQ(view.Put(Member("b", 1), 11), Applied::kStale);
  EXPECT_EQ(Ids(view), std::vector<std::string>{"a"});
}

}  // namespace
}  // namespace drover::sdk
