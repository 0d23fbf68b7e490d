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

// Several events share a revision (a fence; a group of writes committed at one etcd revision). A
// stream can break between two of them, so a watch resumes from the last revision known whole,
// and the replayed events of the partial one that were applied already are told apart.
TEST(ServiceViewTest, AWatchResumesFromTheLastRevisionKnownWhole) {
  ServiceView view("zone");
  ASSERT_EQ(view.Replace({Member("a", 1)}, 5, false), Applied::kApplied);
  EXPECT_EQ(view.resume_revision(), 5u);
  // Revision 7 holds b and c; only b arrived before the stream broke.
  ASSERT_EQ(view.Put(Member("b", 1), 7), Applied::kApplied);
  EXPECT_EQ(view.revision(), 7u);
  EXPECT_EQ(view.resume_revision(), 5u) << "7 may have more events";
  // Resumed from 5: revision 7 again, whole (b is known: a repeat), then 8. Each change to the
  // members counts, so two tables of revision 7 differ by it.
  const std::uint64_t changes = view.changes();
  EXPECT_EQ(view.Put(Member("b", 1), 7), Applied::kRepeated);
  EXPECT_EQ(view.changes(), changes);
  EXPECT_EQ(view.Put(Member("c", 1), 7), Applied::kApplied);
  EXPECT_EQ(view.changes(), changes + 1);
  EXPECT_EQ(view.Table().value()->version(), 7u);
  EXPECT_EQ(view.resume_revision(), 5u);
  EXPECT_EQ(view.Delete("a", 1, 8), Applied::kApplied);
  EXPECT_EQ(view.resume_revision(), 7u) << "an event of 8: 7 is whole";
  EXPECT_EQ(Ids(view), (std::vector<std::string>{"b", "c"}));
  view.Progress(8);
  EXPECT_EQ(view.resume_revision(), 8u) << "a PROGRESS: nothing more up to 8";
  view.Progress(6);
  EXPECT_EQ(view.resume_revision(), 8u);
}

}  // namespace
}  // namespace drover::sdk
