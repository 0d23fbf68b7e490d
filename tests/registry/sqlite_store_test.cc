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

}  // namespace
}  // namespace drover::registry
