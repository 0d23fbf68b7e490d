// SqliteStore: the embedded Store, one SQLite database file in WAL mode with synchronous=FULL,
// so a commit that returned OK survives SIGKILL and power loss. Schema-versioned; opening a
// newer schema fails clearly instead of misreading it. Not thread-safe (see Store).
#pragma once

#include <memory>
#include <string>

#include "registry/store.h"

struct sqlite3;

namespace drover::registry {

class SqliteStore final : public Store {
 public:
  // Opens (creating when missing) `<data_dir>/registry.db`. The directory must exist. Holds an
  // exclusive lock on `<data_dir>/LOCK`: a second store on the same directory (a second registry
  // process) fails with FAILED_PRECONDITION instead of interleaving revisions.
  static Result<std::unique_ptr<SqliteStore>> Open(const std::string& data_dir);
  ~SqliteStore() override;

  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  Result<StoreState> Load() override;
  Result<std::uint64_t> Commit(const std::vector<Write>& writes) override;
  // One transaction and one fsync for the whole batch (group commit).
  Result<std::vector<Result<std::uint64_t>>> CommitBatch(
      const std::vector<std::vector<Write>>& batch) override;
  Status PruneTombstones(const std::vector<Tombstone>& expired) override;
  Result<std::optional<StoredDeploy>> GetDeploy(const std::string& id) override;
  Result<std::vector<StoredDeploy>> ListDeploys(const std::string& service,
                                                std::size_t limit) override;
  Result<std::uint64_t> PutDeploy(const StoredDeploy& deploy,
                                  std::uint64_t expect_version) override;

  const std::string& path() const { return path_; }

  class Statements;  // prepared once, reused by every call

 private:
  SqliteStore(sqlite3* db, std::string path, int lock_fd);
  Status Exec(const char* sql);
  Result<std::uint64_t> CurrentRevision();

  sqlite3* db_;
  std::string path_;
  int lock_fd_;  // <data_dir>/LOCK, flock'ed exclusively for the store's life
  std::unique_ptr<Statements> statements_;
};

}  // namespace drover::registry
