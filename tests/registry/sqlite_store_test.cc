#include "registry/sqlite_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "testing/temp_dir.h"

namespace drover::registry {
namespace {

Instance MakeInstance(const std::string& id, std::uint64_t generation) {
  Instance in;
  in.service = "svc";
  in.id = id;
  in.spec.address = "127.0.0.1:9000";
  in.spec.generation = generation;
  in.spec.state = InstanceState::kReady;
  in.spec.labels = {{"shard", "7"}, {"tier", "gold"}};
  in.spec.zone = "z1";
  in.spec.version = "2.0";
  in.spec.weight = 3;
  in.ready_since = SystemTime(std::chrono::milliseconds(1'700'000'000'123));
  return in;
}

Write Put(const Instance& in, std::optional<std::uint64_t> expect) {
  Write w;
  w.kind = Write::Kind::kPutInstance;
  w.service = in.service;
  w.id = in.id;
  w.instance = in;
  w.create = true;
  w.expect_mod_revision = expect;
  return w;
}

TEST(SqliteStoreTest, CommitAdvancesRevisionAndRoundTrips) {
  testing::TempDir dir;
  {
    auto store = SqliteStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->Load()->revision, 0u);
    EXPECT_EQ(*(*store)->Commit({Put(MakeInstance("a", 1), 0)}), 1u);
    Tombstone t;
    t.service = "svc";
    t.id = "b";
    t.generation = 4;
    t.expires_at = SystemTime(std::chrono::milliseconds(1'800'000'000'000));
    Write tomb;
    tomb.kind = Write::Kind::kPutTombstone;
    tomb.service = "svc";
    tomb.id = "b";
    tomb.tombstone = t;
    EXPECT_EQ(*(*store)->Commit({tomb}), 2u);
  }
  auto store = SqliteStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->revision, 2u);
  ASSERT_EQ(state->instances.size(), 1u);
  Instance expected = MakeInstance("a", 1);
  expected.create_revision = 1;
  expected.mod_revision = 1;
  EXPECT_EQ(state->instances[0], expected);
  ASSERT_EQ(state->tombstones.size(), 1u);
  EXPECT_EQ(state->tombstones[0].generation, 4u);
  EXPECT_EQ(state->tombstones[0].revision, 2u);
}

TEST(SqliteStoreTest, FailedPreconditionWritesNothing) {
  testing::TempDir dir;
  auto store = SqliteStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Commit({Put(MakeInstance("a", 1), 0)}).ok());
  // Second write of the batch expects "a" absent: the whole commit is refused.
  auto result = (*store)->Commit({Put(MakeInstance("c", 1), 0), Put(MakeInstance("a", 2), 0)});
  EXPECT_EQ(result.status().code(), StatusCode::kAborted);
  auto state = (*store)->Load();
  EXPECT_EQ(state->revision, 1u);
  EXPECT_EQ(state->instances.size(), 1u);
  EXPECT_EQ(state->instances[0].spec.generation, 1u);
}

TEST(SqliteStoreTest, ABatchCommitsEachSetAtItsOwnRevisionAndRefusesOnlyTheSetThatFails) {
  testing::TempDir dir;
  {
    auto store = SqliteStore::Open(dir.path());
    ASSERT_TRUE(store.ok());
    ASSERT_EQ(*(*store)->Commit({Put(MakeInstance("a", 1), 0)}), 1u);
    // The second set expects "a" absent: it alone is refused, and spends no revision.
    auto results =
        (*store)->CommitBatch({{Put(MakeInstance("b", 1), 0)},
                               {Put(MakeInstance("x", 1), 0), Put(MakeInstance("a", 2), 0)},
                               {Put(MakeInstance("c", 1), 0)}});
    ASSERT_TRUE(results.ok()) << results.status().ToString();
    ASSERT_EQ(results->size(), 3u);
    EXPECT_EQ((*results)[0].value(), 2u);
    EXPECT_EQ((*results)[1].status().code(), StatusCode::kAborted);
    EXPECT_EQ((*results)[2].value(), 3u);
    // A batch of refusals only: nothing written, the revision stays.
    auto refused = (*store)->CommitBatch({{Put(MakeInstance("a", 3), 0)}});
    ASSERT_TRUE(refused.ok());
    EXPECT_EQ((*refused)[0].status().code(), StatusCode::kAborted);
  }
  auto store = SqliteStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->revision, 3u);
  ASSERT_EQ(state->instances.size(), 3u);
  for (const Instance& in : state->instances) {
    EXPECT_NE(in.id, "x");
    EXPECT_EQ(in.spec.generation, 1u) << in.id;
    const std::uint64_t want = in.id == "a" ? 1 : in.id == "b" ? 2 : 3;
    EXPECT_EQ(in.mod_revision, want) << in.id;
    EXPECT_EQ(in.create_revision, want) << in.id;
  }
}

TEST(SqliteStoreTest, RefusesAnUnknownSchemaVersion) {
  testing::TempDir dir;
  ASSERT_TRUE(SqliteStore::Open(dir.path()).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() + "/registry.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value = 99 WHERE key = 'schema_version'", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto store = SqliteStore::Open(dir.path());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("schema version 99"), std::string::npos);
}

TEST(SqliteStoreTest, SecondStoreOnTheSameDirectoryIsRefused) {
  testing::TempDir dir;
  auto first = SqliteStore::Open(dir.path());
  ASSERT_TRUE(first.ok());
  auto second = SqliteStore::Open(dir.path());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use by another registry"), std::string::npos);
  first->reset();
  EXPECT_TRUE(SqliteStore::Open(dir.path()).ok());  // released with the first store
}

TEST(SqliteStoreTest, MissingDirectoryIsUnavailable) {
  auto store = SqliteStore::Open("/nonexistent-drover-dir/sub");
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable);
}

StoredDeploy Deploy(const std::string& id, const std::string& service, bool active,
                    std::int64_t created_ms, const std::string& note = "") {
  StoredDeploy d;
  d.id = id;
  d.service = service;
  d.record = R"({"service":")" + service + R"(","note":")" + note + R"("})";
  d.active = active;
  d.created_ms = created_ms;
  return d;
}

// A deploy's record is written with compare-and-set on its version, and the service's marker
// admits one running deploy; all of it survives a reopen.
TEST(SqliteStoreTest, DeploysAreVersionedOnePerServiceRunsAndSurviveAReopen) {
  testing::TempDir dir;
  {
    auto store = std::move(SqliteStore::Open(dir.path())).value();
    EXPECT_EQ(store->PutDeploy(Deploy("zone-v1-1", "zone", true, 1000), 0).value(), 1u);
    EXPECT_EQ(store->PutDeploy(Deploy("zone-v1-1", "zone", true, 0, "batch 1"), 1).value(), 2u);
    // A writer that read version 1 lost: it learns the stored version.
    const auto stale = store->PutDeploy(Deploy("zone-v1-1", "zone", true, 0, "stale"), 1);
    EXPECT_EQ(stale.status().code(), StatusCode::kAborted);
    EXPECT_NE(stale.status().message().find("is at version 2, not 1"), std::string::npos);
    // A second deploy of zone while the first runs is refused, naming it; chat is free.
    const auto second = store->PutDeploy(Deploy("zone-v2-1", "zone", true, 2000), 0);
    EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(second.status().message().find("deploy zone-v1-1 of zone is running"),
              std::string::npos);
    EXPECT_FALSE(store->GetDeploy("zone-v2-1").value().has_value());  // nothing written
    EXPECT_EQ(store->PutDeploy(Deploy("chat-v1-1", "chat", true, 1500), 0).value(), 1u);
    // Finishing gives the marker up.
    EXPECT_EQ(store->PutDeploy(Deploy("zone-v1-1", "zone", false, 0, "done"), 2).value(), 3u);
    EXPECT_EQ(store->PutDeploy(Deploy("zone-v2-1", "zone", true, 2000), 0).value(), 1u);
  }
  auto store = std::move(SqliteStore::Open(dir.path())).value();
  const auto first = store->GetDeploy("zone-v1-1").value();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->version, 3u);
  EXPECT_FALSE(first->active);
  EXPECT_EQ(first->created_ms, 1000);  // the first write's, kept
  EXPECT_NE(first->record.find("done"), std::string::npos);
  const auto zone = store->ListDeploys("zone", 10).value();
  ASSERT_EQ(zone.size(), 2u);
  EXPECT_EQ(zone[0].id, "zone-v2-1");  // newest first
  EXPECT_TRUE(zone[0].active);
  EXPECT_EQ(zone[1].id, "zone-v1-1");
  EXPECT_EQ(store->ListDeploys("", 10).value().size(), 3u);
  EXPECT_EQ(store->ListDeploys("", 1).value().size(), 1u);
}

TEST(SqliteStoreTest, TheDeployHistoryIsBoundedButKeepsTheRunningOne) {
  testing::TempDir dir;
  auto store = std::move(SqliteStore::Open(dir.path())).value();
  ASSERT_TRUE(store->PutDeploy(Deploy("zone-running", "zone", true, 1), 0).ok());
  for (int i = 0; i < 205; ++i) {
    ASSERT_TRUE(
        store->PutDeploy(Deploy("zone-" + std::to_string(i), "zone", false, 10 + i), 0).ok());
  }
  const auto all = store->ListDeploys("zone", 1000).value();
  EXPECT_EQ(all.size(), 201u);  // the newest 200, and the running one however old
  EXPECT_EQ(all.front().id, "zone-204");
  EXPECT_EQ(all.back().id, "zone-running");
}

}  // namespace
}  // namespace drover::registry
