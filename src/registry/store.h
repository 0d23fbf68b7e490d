// Store: where the registry's durable state lives (REG-7). One interface for the embedded SQLite
// store and for etcd: a global revision that every commit advances, atomic multi-key commits with
// compare-and-set preconditions, and a full load at start-up.
//
// What is durable: instances (with spec, generation, state, revisions) and tombstones. What is
// not: leases -- a heartbeat renews a lease in memory only, the way etcd's leader keeps lease
// deadlines; see Registry for what a restart does to them.
//
// A store is either private to one registry process (SQLite: the registry applies its own commits
// to its in-memory view) or shared by several (etcd, `shared()`): then every process learns of
// every commit -- its own included -- from the store's feed (Follow), in revision order, and the
// store also elects the one process that expires leases and carries lease renewals between the
// processes. Revisions always increase; on a shared store they need not be consecutive.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"
#include "registry/model.h"

namespace drover::registry {

struct StoreState {
  std::uint64_t revision = 0;
  std::vector<Instance> instances;
  std::vector<Tombstone> tombstones;
  // Shared stores: the services the expirer last reported in self-preservation (ShareDegraded).
  std::vector<std::string> degraded;
};

// A deploy as the registry keeps it for the deploy controller: its record (the controller's JSON
// document: spec, placement, batches, each instance's state, verdicts, events) and a version that
// every write increments, so that two writers cannot overwrite each other unseen. Deploys are
// not part of the registry's revisions: writing one makes no watch event.
struct StoredDeploy {
  std::string id;
  std::string service;
  std::string record;           // JSON text
  std::uint64_t version = 0;    // 0: never stored
  std::int64_t created_ms = 0;  // first stored, wall clock: the history's order
  bool active = false;          // holds its service's marker: one running deploy per service
};

// One change inside a commit.
struct Write {
  enum class Kind : std::uint8_t { kPutInstance, kDeleteInstance, kPutTombstone, kDeleteTombstone };
  Kind kind = Kind::kPutInstance;
  std::string service;
  std::string id;
  // kPutInstance: the value; the store sets mod_revision (and create_revision when `create`) to
  // the commit's revision.
  Instance instance;
  bool create = false;
  // kPutTombstone: the value; the store sets its revision to the commit's revision.
  Tombstone tombstone;
  // kDeleteInstance: why it goes (carried to other registry processes with the change).
  RemovalReason reason = RemovalReason::kDeregister;
  // Compare-and-set on the instance row: its current mod_revision must equal this (0: the row
  // must not exist). Unset: unconditional.
  std::optional<std::uint64_t> expect_mod_revision;
};

// A commit as a shared store reports it: the writes with the revisions the store assigned filled
// in (an instance's mod_revision, and create_revision unless `create`; a tombstone's revision).
struct Change {
  std::uint64_t revision = 0;
  std::vector<Write> writes;
};

// One lease renewal (a heartbeat accepted for an instance at `generation`).
struct LeaseRenewal {
  std::string service;
  std::string id;
  std::uint64_t generation = 0;
};

// Where a shared store delivers what every registry process committed. Called from the store's
// own thread, one call at a time, changes in revision order.
class StoreListener {
 public:
  virtual ~StoreListener() = default;
  virtual void OnChange(const Change& change) = 0;
  // Whether the listener holds every change up to `revision` already (a registry process applies
  // its own commits as they return): the feed then need not decode that revision's instances and
  // tombstones, as OnChange would ignore them. Renewals and degraded reports are delivered anyway.
  virtual bool Holds(std::uint64_t /*revision*/) { return false; }
  // The feed lost its place (the store compacted past it while it was disconnected): this is
  // everything, at `state.revision`; changes continue from there.
  virtual void OnReset(StoreState state) = 0;
  // Leases that another registry process renewed.
  virtual void OnRenewals(const std::vector<LeaseRenewal>& renewals) = 0;
  // The feed is back after a break: renewals other processes accepted meanwhile may be lost.
  virtual void OnFeedRestored() = 0;
  // The services the expirer now holds in self-preservation (its own reports included).
  virtual void OnDegraded(const std::vector<std::string>& services) = 0;
};

// A private store is not thread-safe: the registry serialises every call. A shared store is
// thread-safe.
class Store {
 public:
  virtual ~Store() = default;

  // Everything durable and the revision it reflects.
  virtual Result<StoreState> Load() = 0;

  // Applies `writes` atomically at a new revision when every precondition holds, and returns
  // that revision. Every precondition is judged on the rows as they were before the commit (as
  // etcd judges a Txn's compares), and a commit writes each instance at most once. ABORTED when
  // a precondition fails (nothing is written); UNAVAILABLE or INTERNAL when the store fails.
  // When it returns OK the commit survives a crash of this process (SIGKILL) and, for the SQLite
  // store, of the machine.
  virtual Result<std::uint64_t> Commit(const std::vector<Write>& writes) = 0;

  // Several independent commits made durable together (group commit): each set of writes is
  // applied atomically at its own revision, in order (the first at the current revision + 1,
  // each next one at the revision after the last set written), when its own preconditions
  // hold. One result per set: its revision, or ABORTED when a precondition failed (nothing of
  // that set is written; the others are, and no revision is spent on it), or the store's error
  // for that set. A failed call (UNAVAILABLE or INTERNAL) wrote no set at all -- on a shared
  // store, whose call may fail after the store applied it, none that the feed will not report.
  // A shared store may write every set of one call at one revision (in one change on its feed);
  // no two sets of a call may write the same instance. Durable as Commit() once it returns. This
  // default commits the sets one by one.
  virtual Result<std::vector<Result<std::uint64_t>>> CommitBatch(
      const std::vector<std::vector<Write>>& batch) {
    std::vector<Result<std::uint64_t>> results;
    results.reserve(batch.size());
    for (const std::vector<Write>& writes : batch) results.push_back(Commit(writes));
    return results;
  }

  // Removes tombstones. A private store does so without advancing the revision (no watch
  // events); a shared one commits the deletions, which its feed reports.
  virtual Status PruneTombstones(const std::vector<Tombstone>& expired) = 0;

  // --- Deploys (not part of the revision; see StoredDeploy). ---
  // The deploy with that id, or nullopt.
  virtual Result<std::optional<StoredDeploy>> GetDeploy(const std::string& /*id*/) {
    return UnimplementedError("this store keeps no deploys");
  }
  // The newest `limit` deploys of `service` (every service when empty), newest first.
  virtual Result<std::vector<StoredDeploy>> ListDeploys(const std::string& /*service*/,
                                                        std::size_t /*limit*/) {
    return UnimplementedError("this store keeps no deploys");
  }
  // Stores `deploy` (its record and `active`) when the stored version is `expect_version` (0: it
  // must not exist yet), and returns the new version (expect_version + 1). ABORTED, naming the
  // stored version, when it differs. With `active`, the deploy also takes its service's marker:
  // FAILED_PRECONDITION naming the deploy holding it when another one does. Without, it gives
  // the marker up if it held it. A store keeps at least the newest 200 deploys per service (and
  // every active one); older ones may go. Atomic, and durable once it returns.
  virtual Result<std::uint64_t> PutDeploy(const StoredDeploy& /*deploy*/,
                                          std::uint64_t /*expect_version*/) {
    return UnimplementedError("this store keeps no deploys");
  }

  // --- Shared stores only; a private store keeps these defaults. ---
  virtual bool shared() const { return false; }
  // Starts delivering every change committed after `revision` to `listener`, until the store is
  // destroyed. The listener must outlive the store.
  virtual Status Follow(std::uint64_t /*revision*/, StoreListener* /*listener*/) {
    return Status::Ok();
  }
  // Returns once the feed has delivered every change up to `revision` (DEADLINE_EXCEEDED after
  // `timeout`).
  virtual Status WaitDelivered(std::uint64_t /*revision*/, Duration /*timeout*/) {
    return Status::Ok();
  }
  // The store's current revision: after a lost compare-and-set, waiting for the feed to deliver
  // it shows this process what the other one wrote.
  virtual Result<std::uint64_t> Head() { return std::uint64_t{0}; }
  // Whether a commit's revision is always exactly one past the store's revision before it (etcd:
  // a Txn that writes is one revision). Then a process whose view stands at revision R - 1 when
  // its own commit came back at R has seen everything before that commit -- nothing can come
  // between -- and may apply the commit itself instead of waiting for the feed to bring it back
  // (the feed's copy then arrives at a revision the view already holds). Revisions the process
  // never sees (keys of others outside its prefix) only make that case rarer.
  virtual bool consecutive_revisions() const { return false; }
  // Whether this process is the one that expires leases right now.
  virtual bool Expirer() const { return true; }
  // Commit() that succeeds only while this process is still the expirer (ABORTED otherwise), so
  // a process that lost the role without noticing cannot expire anything.
  virtual Result<std::uint64_t> CommitAsExpirer(const std::vector<Write>& writes) {
    return Commit(writes);
  }
  // The expirer's services in self-preservation, for the other processes: every registry of a
  // shared store reports the same `degraded` on lists, watches and /ready. Written when the set
  // changes; the feed delivers it to every process (OnDegraded) and Load() returns the last one.
  virtual Status ShareDegraded(const std::vector<std::string>& /*services*/) {
    return Status::Ok();
  }
  // Lease renewals this process accepted, for the other processes (batched by the store).
  virtual void ShareRenewals(const std::vector<LeaseRenewal>& /*renewals*/) {}
  // How much later than here a renewal may reach the expirer: expiry waits that much longer.
  virtual Duration RenewalDelay() const { return Duration::zero(); }
};

}  // namespace drover::registry
