// Store: where the registry's durable state lives (REG-7). One interface for the embedded SQLite
// store and, later, etcd: a global revision that every commit advances by one, atomic multi-key
// commits with compare-and-set preconditions, and a full load at start-up.
//
// What is durable: instances (with spec, generation, state, revisions) and tombstones. What is
// not: leases -- a heartbeat renews a lease in memory only, the way etcd's leader keeps lease
// deadlines; see Registry for what a restart does to them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "drover/status.h"
#include "registry/model.h"

namespace drover::registry {

struct StoreState {
  std::uint64_t revision = 0;
  std::vector<Instance> instances;
  std::vector<Tombstone> tombstones;
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
  // Compare-and-set on the instance row: its current mod_revision must equal this (0: the row
  // must not exist). Unset: unconditional.
  std::optional<std::uint64_t> expect_mod_revision;
};

// Not thread-safe: the registry serialises every call.
class Store {
 public:
  virtual ~Store() = default;

  // Everything durable and the revision it reflects.
  virtual Result<StoreState> Load() = 0;

  // Applies `writes` atomically as revision (current + 1) when every precondition holds, and
  // returns that revision. ABORTED when a precondition fails (nothing is written); UNAVAILABLE
  // or INTERNAL when the store fails. When it returns OK the commit survives a crash of this
  // process (SIGKILL) and, for the SQLite store, of the machine.
  virtual Result<std::uint64_t> Commit(const std::vector<Write>& writes) = 0;

  // Removes tombstones without advancing the revision (they produce no watch events).
  virtual Status PruneTombstones(const std::vector<Tombstone>& expired) = 0;
};

}  // namespace drover::registry
