#include "registry/sqlite_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include "registry/json_codec.h"

namespace drover::registry {
namespace {

constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS instances (
  service         TEXT NOT NULL,
  id              TEXT NOT NULL,
  address         TEXT NOT NULL,
  generation      INTEGER NOT NULL,
  state           INTEGER NOT NULL,
  ttl_ms          INTEGER NOT NULL,
  weight          INTEGER NOT NULL,
  zone            TEXT NOT NULL,
  labels          TEXT NOT NULL,
  version         TEXT NOT NULL,
  accepting       INTEGER NOT NULL,
  create_revision INTEGER NOT NULL,
  mod_revision    INTEGER NOT NULL,
  ready_since_ms  INTEGER NOT NULL,
  PRIMARY KEY (service, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deploys (
  id         TEXT PRIMARY KEY,
  service    TEXT NOT NULL,
  record     TEXT NOT NULL,
  version    INTEGER NOT NULL,
  created_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS deploys_by_service ON deploys (service, created_ms);
CREATE TABLE IF NOT EXISTS active_deploys (
  service TEXT PRIMARY KEY,
  id      TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tombstones (
  service       TEXT NOT NULL,
  id            TEXT NOT NULL,
  generation    INTEGER NOT NULL,
  revision      INTEGER NOT NULL,
  expires_at_ms INTEGER NOT NULL,
  PRIMARY KEY (service, id)
) WITHOUT ROWID;
)sql";

}  // namespace

// Every statement the store runs, prepared once (on first use) and kept until the store closes:
// a commit of many writes spends its time writing, not parsing SQL.
class SqliteStore::Statements {
 public:
  explicit Statements(sqlite3* db) : db_(db) {}
  ~Statements() {
    for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  }
  Statements(const Statements&) = delete;
  Statements& operator=(const Statements&) = delete;

  sqlite3* db() const { return db_; }
  // The prepared statement for `sql` (a string literal: its address is the key), or null with
  // `rc` set when it does not prepare.
  sqlite3_stmt* Get(const char* sql, int& rc) {
    rc = SQLITE_OK;
    if (auto it = cache_.find(sql); it != cache_.end()) return it->second;
    sqlite3_stmt* stmt = nullptr;
    rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return nullptr;
    cache_.emplace(sql, stmt);
    return stmt;
  }

 private:
  sqlite3* db_;
  std::unordered_map<const char*, sqlite3_stmt*> cache_;
};

namespace {

using Statements = SqliteStore::Statements;

// One use of a cached statement: bound, stepped, and reset (bindings cleared) on scope exit.
class Statement {
 public:
  Statement(Statements& cache, const char* sql) : db_(cache.db()) { stmt_ = cache.Get(sql, rc_); }
  ~Statement() {
    if (stmt_ == nullptr) return;
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Status status() const {
    if (rc_ == SQLITE_OK) return Status::Ok();
    return InternalError(std::string("sqlite prepare: ") + sqlite3_errmsg(db_));
  }
  void Bind(int i, std::int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  // Bound as is, not copied (SQLITE_STATIC): `v` must outlive this Statement, which clears its
  // bindings when it goes -- the writes' and deploys' own strings do. A temporary is copied.
  void Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
  }
  void Bind(int i, std::string&& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return sqlite3_step(stmt_); }
  std::int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }
  std::string Text(int col) {
    const auto* p = sqlite3_column_text(stmt_, col);
    return p == nullptr ? std::string()
                        : std::string(reinterpret_cast<const char*>(p),
                                      static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)));
  }
  Status Done(const char* what) {
    const int rc = Step();
    if (rc == SQLITE_DONE) return Status::Ok();
    return Error(what, rc);
  }
  Status Error(const char* what, int rc) const {
    const std::string msg = std::string("sqlite ") + what + ": " + sqlite3_errmsg(db_);
    // Busy/locked/full/IO are conditions of the machine, not of the request.
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED || rc == SQLITE_FULL || rc == SQLITE_IOERR) {
      return UnavailableError(msg);
    }
    return InternalError(msg);
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

// Runs one statement without results (transaction control): prepared once, like the rest.
Status Run(Statements& cache, const char* sql, const char* what) {
  Statement stmt(cache, sql);
  DROVER_RETURN_IF_ERROR(stmt.status());
  const Status s = stmt.Done(what);
  // Transaction control failing is a condition of the machine (disk, locks), not of a request.
  if (!s.ok()) return UnavailableError(s.message());
  return s;
}

std::string LabelsToJson(const std::map<std::string, std::string>& labels) {
  std::string out;
  AppendLabelsJson(out, labels);
  return out;
}

Result<std::map<std::string, std::string>> LabelsFromJson(const std::string& text) {
  auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return DataLossError("registry.db: malformed labels column: " + text);
  }
  std::map<std::string, std::string> labels;
  for (const auto& [key, value] : parsed.items()) {
    if (!value.is_string()) {
      return DataLossError("registry.db: non-string label value for " + key);
    }
    labels[key] = value.get<std::string>();
  }
  return labels;
}

// Rolls back an open transaction unless committed.
class Transaction {
 public:
  explicit Transaction(Statements& cache) : cache_(cache) {}
  ~Transaction() {
    if (open_) (void)Run(cache_, "ROLLBACK", "rollback");
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  Status Begin() {
    DROVER_RETURN_IF_ERROR(Run(cache_, "BEGIN IMMEDIATE", "begin"));
    open_ = true;
    return Status::Ok();
  }
  // With synchronous=FULL in WAL mode, returns once the commit is on disk (fsync).
  Status Commit() {
    DROVER_RETURN_IF_ERROR(Run(cache_, "COMMIT", "commit"));
    open_ = false;
    return Status::Ok();
  }

 private:
  Statements& cache_;
  bool open_ = false;
};

// ABORTED when the write expects a mod_revision the instance no longer has (0: absent).
Status CheckExpectedRevision(Statements& db, const Write& w) {
  if (!w.expect_mod_revision.has_value()) return Status::Ok();
  Statement get(db, "SELECT mod_revision FROM instances WHERE service = ?1 AND id = ?2");
  DROVER_RETURN_IF_ERROR(get.status());
  get.Bind(1, w.service);
  get.Bind(2, w.id);
  const std::uint64_t actual =
      get.Step() == SQLITE_ROW ? static_cast<std::uint64_t>(get.Int(0)) : 0;
  if (actual != *w.expect_mod_revision) {
    return AbortedError("store: " + w.service + "/" + w.id +
                        " changed concurrently (mod_revision " + std::to_string(actual) +
                        ", expected " + std::to_string(*w.expect_mod_revision) + ")");
  }
  return Status::Ok();
}

Status PutInstance(Statements& db, const Write& w, std::int64_t rev) {
  const Instance& in = w.instance;
  Statement put(db,
                "INSERT OR REPLACE INTO instances (service, id, address, generation, state, "
                "ttl_ms, weight, zone, labels, version, accepting, create_revision, "
                "mod_revision, ready_since_ms) VALUES "
                "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)");
  DROVER_RETURN_IF_ERROR(put.status());
  put.Bind(1, w.service);
  put.Bind(2, w.id);
  put.Bind(3, in.spec.address);
  put.Bind(4, static_cast<std::int64_t>(in.spec.generation));
  put.Bind(5, static_cast<std::int64_t>(in.spec.state));
  put.Bind(6, in.spec.ttl_ms);
  put.Bind(7, static_cast<std::int64_t>(in.spec.weight));
  put.Bind(8, in.spec.zone);
  put.Bind(9, LabelsToJson(in.spec.labels));
  put.Bind(10, in.spec.version);
  put.Bind(11, in.spec.accepting ? 1 : 0);
  put.Bind(12, w.create ? rev : static_cast<std::int64_t>(in.create_revision));
  put.Bind(13, rev);
  put.Bind(14, ToUnixMillis(in.ready_since));
  return put.Done("put instance");
}

Status PutTombstone(Statements& db, const Write& w, std::int64_t rev) {
  Statement put(db,
                "INSERT OR REPLACE INTO tombstones (service, id, generation, revision, "
                "expires_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)");
  DROVER_RETURN_IF_ERROR(put.status());
  put.Bind(1, w.service);
  put.Bind(2, w.id);
  put.Bind(3, static_cast<std::int64_t>(w.tombstone.generation));
  put.Bind(4, rev);
  put.Bind(5, ToUnixMillis(w.tombstone.expires_at));
  return put.Done("put tombstone");
}

// `sql` deletes the row of (?1 service, ?2 id).
Status DeleteRow(Statements& db, const char* sql, const Write& w, const char* what) {
  Statement del(db, sql);
  DROVER_RETURN_IF_ERROR(del.status());
  del.Bind(1, w.service);
  del.Bind(2, w.id);
  return del.Done(what);
}

// One write of a commit at revision `rev`.
Status ApplyWrite(Statements& db, const Write& w, std::int64_t rev) {
  switch (w.kind) {
    case Write::Kind::kPutInstance:
      return PutInstance(db, w, rev);
    case Write::Kind::kDeleteInstance:
      return DeleteRow(db, "DELETE FROM instances WHERE service = ?1 AND id = ?2", w,
                       "delete instance");
    case Write::Kind::kPutTombstone:
      return PutTombstone(db, w, rev);
    case Write::Kind::kDeleteTombstone:
      return DeleteRow(db, "DELETE FROM tombstones WHERE service = ?1 AND id = ?2", w,
                       "delete tombstone");
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& data_dir) {
  const std::string path = data_dir + "/registry.db";
  const std::string lock_path = data_dir + "/LOCK";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    return UnavailableError("cannot open " + lock_path + ": " + std::strerror(errno));
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd);
    return FailedPreconditionError(data_dir + " is in use by another registry process (it holds " +
                                   lock_path + ")");
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = "cannot open " + path + ": " + (db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    ::close(lock_fd);
    return UnavailableError(std::move(msg));
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(db, path, lock_fd));
  sqlite3_busy_timeout(db, 5000);
  // WAL with synchronous=FULL: every COMMIT is fsynced before it returns.
  DROVER_RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL"));
  DROVER_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=FULL"));
  DROVER_RETURN_IF_ERROR(store->Exec("PRAGMA foreign_keys=ON"));
  DROVER_RETURN_IF_ERROR(store->Exec(kSchema));

  Statement get(*store->statements_, "SELECT value FROM meta WHERE key = 'schema_version'");
  DROVER_RETURN_IF_ERROR(get.status());
  if (get.Step() == SQLITE_ROW) {
    const std::int64_t version = get.Int(0);
    if (version != kSchemaVersion) {
      return FailedPreconditionError(path + " has schema version " + std::to_string(version) +
                                     "; this drover understands version " +
                                     std::to_string(kSchemaVersion));
    }
  } else {
    DROVER_RETURN_IF_ERROR(
        store->Exec("INSERT INTO meta (key, value) VALUES ('schema_version', 1), ('revision', 0)"));
  }
  return store;
}

SqliteStore::SqliteStore(sqlite3* db, std::string path, int lock_fd)
    : db_(db),
      path_(std::move(path)),
      lock_fd_(lock_fd),
      statements_(std::make_unique<Statements>(db)) {}

SqliteStore::~SqliteStore() {
  statements_.reset();  // finalized before the connection closes
  sqlite3_close(db_);
  ::close(lock_fd_);  // releases the flock
}

Status SqliteStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = std::string("sqlite: ") + (err ? err : sqlite3_errmsg(db_));
    sqlite3_free(err);
    return InternalError(std::move(msg));
  }
  return Status::Ok();
}

Result<std::uint64_t> SqliteStore::CurrentRevision() {
  Statement get(*statements_, "SELECT value FROM meta WHERE key = 'revision'");
  DROVER_RETURN_IF_ERROR(get.status());
  if (get.Step() != SQLITE_ROW) return DataLossError("registry.db: no revision");
  return static_cast<std::uint64_t>(get.Int(0));
}

Result<StoreState> SqliteStore::Load() {
  StoreState state;
  DROVER_ASSIGN_OR_RETURN(state.revision, CurrentRevision());
  Statement rows(*statements_,
                 "SELECT service, id, address, generation, state, ttl_ms, weight, zone, labels, "
                 "version, accepting, create_revision, mod_revision, ready_since_ms "
                 "FROM instances ORDER BY service, id");
  DROVER_RETURN_IF_ERROR(rows.status());
  int rc;
  while ((rc = rows.Step()) == SQLITE_ROW) {
    Instance in;
    in.service = rows.Text(0);
    in.id = rows.Text(1);
    in.spec.address = rows.Text(2);
    in.spec.generation = static_cast<std::uint64_t>(rows.Int(3));
    const std::int64_t st = rows.Int(4);
    if (st < 0 || st > 2) {
      return DataLossError("registry.db: bad state " + std::to_string(st));
    }
    in.spec.state = static_cast<InstanceState>(st);
    in.spec.ttl_ms = rows.Int(5);
    in.spec.weight = static_cast<std::uint32_t>(rows.Int(6));
    in.spec.zone = rows.Text(7);
    DROVER_ASSIGN_OR_RETURN(in.spec.labels, LabelsFromJson(rows.Text(8)));
    in.spec.version = rows.Text(9);
    in.spec.accepting = rows.Int(10) != 0;
    in.create_revision = static_cast<std::uint64_t>(rows.Int(11));
    in.mod_revision = static_cast<std::uint64_t>(rows.Int(12));
    in.ready_since = FromUnixMillis(rows.Int(13));
    state.instances.push_back(std::move(in));
  }
  if (rc != SQLITE_DONE) return rows.Error("load instances", rc);

  Statement tombs(*statements_,
                  "SELECT service, id, generation, revision, expires_at_ms FROM tombstones "
                  "ORDER BY service, id");
  DROVER_RETURN_IF_ERROR(tombs.status());
  while ((rc = tombs.Step()) == SQLITE_ROW) {
    Tombstone t;
    t.service = tombs.Text(0);
    t.id = tombs.Text(1);
    t.generation = static_cast<std::uint64_t>(tombs.Int(2));
    t.revision = static_cast<std::uint64_t>(tombs.Int(3));
    t.expires_at = FromUnixMillis(tombs.Int(4));
    state.tombstones.push_back(std::move(t));
  }
  if (rc != SQLITE_DONE) return tombs.Error("load tombstones", rc);
  return state;
}

Result<std::uint64_t> SqliteStore::Commit(const std::vector<Write>& writes) {
  DROVER_ASSIGN_OR_RETURN(auto results, CommitBatch({writes}));
  return std::move(results.front());
}

Result<std::vector<Result<std::uint64_t>>> SqliteStore::CommitBatch(
    const std::vector<std::vector<Write>>& batch) {
  std::vector<Result<std::uint64_t>> results;
  results.reserve(batch.size());
  Transaction txn(*statements_);
  DROVER_RETURN_IF_ERROR(txn.Begin());
  DROVER_ASSIGN_OR_RETURN(const std::uint64_t current, CurrentRevision());
  std::uint64_t revision = current;
  // Each set's preconditions are read before any of its writes (Store::Commit: judged on the
  // rows as they were), so a set that fails one has written nothing and needs no savepoint to
  // roll back -- two statements less per set, about 1.5 us of a registration's ~30. A store
  // failure fails the batch: the transaction rolls back whole.
  for (const std::vector<Write>& writes : batch) {
    const auto rev = static_cast<std::int64_t>(revision + 1);
    Status s;
    for (const Write& w : writes) {
      s = CheckExpectedRevision(*statements_, w);
      if (!s.ok()) break;
    }
    if (s.ok()) {
      for (const Write& w : writes) {
        s = ApplyWrite(*statements_, w, rev);
        if (!s.ok()) break;
      }
    }
    if (!s.ok() && s.code() != StatusCode::kAborted) return s;
    if (s.ok()) {
      results.emplace_back(++revision);
    } else {
      results.emplace_back(std::move(s));
    }
  }
  if (revision != current) {
    Statement bump(*statements_, "UPDATE meta SET value = ?1 WHERE key = 'revision'");
    DROVER_RETURN_IF_ERROR(bump.status());
    bump.Bind(1, static_cast<std::int64_t>(revision));
    DROVER_RETURN_IF_ERROR(bump.Done("advance revision"));
  }
  DROVER_RETURN_IF_ERROR(txn.Commit());
  return results;
}

Status SqliteStore::PruneTombstones(const std::vector<Tombstone>& expired) {
  if (expired.empty()) return Status::Ok();
  Transaction txn(*statements_);
  DROVER_RETURN_IF_ERROR(txn.Begin());
  for (const Tombstone& t : expired) {
    // Only the tombstone that expired: a newer one for the same id stays.
    Statement del(*statements_,
                  "DELETE FROM tombstones WHERE service = ?1 AND id = ?2 AND revision = ?3");
    DROVER_RETURN_IF_ERROR(del.status());
    del.Bind(1, t.service);
    del.Bind(2, t.id);
    del.Bind(3, static_cast<std::int64_t>(t.revision));
    DROVER_RETURN_IF_ERROR(del.Done("prune tombstone"));
  }
  return txn.Commit();
}

namespace {

constexpr std::size_t kDeploysKept = 200;  // per service, besides active ones

Result<std::optional<StoredDeploy>> ReadDeploy(Statements& db, const std::string& id) {
  Statement get(db,
                "SELECT d.service, d.record, d.version, d.created_ms, a.id IS NOT NULL FROM "
                "deploys d LEFT JOIN active_deploys a ON a.service = d.service AND a.id = d.id "
                "WHERE d.id = ?1");
  DROVER_RETURN_IF_ERROR(get.status());
  get.Bind(1, id);
  const int rc = get.Step();
  if (rc == SQLITE_DONE) return std::optional<StoredDeploy>();
  if (rc != SQLITE_ROW) return get.Error("get deploy", rc);
  StoredDeploy d;
  d.id = id;
  d.service = get.Text(0);
  d.record = get.Text(1);
  d.version = static_cast<std::uint64_t>(get.Int(2));
  d.created_ms = get.Int(3);
  d.active = get.Int(4) != 0;
  return std::optional<StoredDeploy>(std::move(d));
}

// Takes or gives up the service's marker for `d`; FAILED_PRECONDITION when another holds it.
Status MarkActive(Statements& db, const StoredDeploy& d) {
  Statement holder(db, "SELECT id FROM active_deploys WHERE service = ?1");
  DROVER_RETURN_IF_ERROR(holder.status());
  holder.Bind(1, d.service);
  const std::string held = holder.Step() == SQLITE_ROW ? holder.Text(0) : "";
  if (d.active) {
    if (!held.empty() && held != d.id) {
      return FailedPreconditionError("deploy " + held + " of " + d.service +
                                     " is running; one deploy per service at a time");
    }
    Statement put(db, "INSERT OR REPLACE INTO active_deploys (service, id) VALUES (?1, ?2)");
    DROVER_RETURN_IF_ERROR(put.status());
    put.Bind(1, d.service);
    put.Bind(2, d.id);
    return put.Done("mark deploy active");
  }
  if (held != d.id) return Status::Ok();
  Statement del(db, "DELETE FROM active_deploys WHERE service = ?1 AND id = ?2");
  DROVER_RETURN_IF_ERROR(del.status());
  del.Bind(1, d.service);
  del.Bind(2, d.id);
  return del.Done("release deploy marker");
}

}  // namespace

Result<std::optional<StoredDeploy>> SqliteStore::GetDeploy(const std::string& id) {
  return ReadDeploy(*statements_, id);
}

Result<std::vector<StoredDeploy>> SqliteStore::ListDeploys(const std::string& service,
                                                           std::size_t limit) {
  Statement list(*statements_,
                 "SELECT d.id, d.service, d.record, d.version, d.created_ms, a.id IS NOT NULL "
                 "FROM deploys d LEFT JOIN active_deploys a ON a.service = d.service AND "
                 "a.id = d.id WHERE ?1 = '' OR d.service = ?1 "
                 "ORDER BY d.created_ms DESC, d.id DESC LIMIT ?2");
  DROVER_RETURN_IF_ERROR(list.status());
  list.Bind(1, service);
  list.Bind(2, static_cast<std::int64_t>(limit));
  std::vector<StoredDeploy> out;
  int rc;
  while ((rc = list.Step()) == SQLITE_ROW) {
    StoredDeploy d;
    d.id = list.Text(0);
    d.service = list.Text(1);
    d.record = list.Text(2);
    d.version = static_cast<std::uint64_t>(list.Int(3));
    d.created_ms = list.Int(4);
    d.active = list.Int(5) != 0;
    out.push_back(std::move(d));
  }
  if (rc != SQLITE_DONE) return list.Error("list deploys", rc);
  return out;
}

Result<std::uint64_t> SqliteStore::PutDeploy(const StoredDeploy& deploy,
                                             std::uint64_t expect_version) {
  Transaction txn(*statements_);
  DROVER_RETURN_IF_ERROR(txn.Begin());
  DROVER_ASSIGN_OR_RETURN(const auto stored, ReadDeploy(*statements_, deploy.id));
  const std::uint64_t actual = stored ? stored->version : 0;
  if (actual != expect_version) {
    return AbortedError("deploy " + deploy.id + " is at version " + std::to_string(actual) +
                        ", not " + std::to_string(expect_version) + ": someone else wrote it");
  }
  if (stored && stored->service != deploy.service) {
    return InvalidArgumentError("deploy " + deploy.id + " is of " + stored->service + ", not " +
                                deploy.service);
  }
  DROVER_RETURN_IF_ERROR(MarkActive(*statements_, deploy));
  Statement put(*statements_,
                "INSERT OR REPLACE INTO deploys (id, service, record, version, created_ms) "
                "VALUES (?1, ?2, ?3, ?4, ?5)");
  DROVER_RETURN_IF_ERROR(put.status());
  put.Bind(1, deploy.id);
  put.Bind(2, deploy.service);
  put.Bind(3, deploy.record);
  put.Bind(4, static_cast<std::int64_t>(expect_version + 1));
  put.Bind(5, stored ? stored->created_ms : deploy.created_ms);
  DROVER_RETURN_IF_ERROR(put.Done("put deploy"));
  if (!stored) {
    // The history stays bounded: beyond the newest kept, finished deploys go.
    Statement prune(*statements_,
                    "DELETE FROM deploys WHERE service = ?1 AND id NOT IN (SELECT id FROM "
                    "active_deploys) AND id NOT IN (SELECT id FROM deploys WHERE service = ?1 "
                    "ORDER BY created_ms DESC, id DESC LIMIT ?2)");
    DROVER_RETURN_IF_ERROR(prune.status());
    prune.Bind(1, deploy.service);
    prune.Bind(2, static_cast<std::int64_t>(kDeploysKept));
    DROVER_RETURN_IF_ERROR(prune.Done("prune deploys"));
  }
  DROVER_RETURN_IF_ERROR(txn.Commit());
  return expect_version + 1;
}

}  // namespace drover::registry
