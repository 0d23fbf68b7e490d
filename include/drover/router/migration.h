// Staged key migration (RT-4; seed 002's state hand-off): when the members of a key-affine table
// change, keys move to their new owners in steps instead of all at once, and every routing
// decision during the move can say which owner a key is leaving.
//
// A KeyMigration holds the snapshot keys were routed on (`from`) and the new one (`to`). A key
// whose owner is the same in both never moves. A key whose old owner is gone from `to` (or no
// longer owns keys there) moves at once: nothing is left to hand off from. Every other key moves
// at its own step, 1..steps, fixed by its hash (a remix of it, so each step moves about the same
// share of the moving keys): before that step it stays on its old owner, from it on it is on the
// new one, which can fetch the key's state from `previous` -- the owner it is taking over from.
// At step `steps` every key is where `to` alone puts it.
//
// Immutable; thread-safe to read. Owner indices are positions in `to`'s table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "drover/router/router.h"
#include "drover/status.h"

namespace drover::router {

class KeyMigration {
 public:
  struct Owners {
    std::size_t owner = 0;                // where the key goes at this step
    std::optional<std::size_t> previous;  // the owner it moved from, once it has moved
    bool moving = false;                  // the key changes owner in this migration
  };

  // `steps` >= 1 (0 is taken as 1). Both snapshots must have the same picker (Maglev or ring).
  KeyMigration(std::shared_ptr<const RouterSnapshot> from, std::shared_ptr<const RouterSnapshot> to,
               std::uint32_t steps);

  // The key's owners at `step` (clamped to 0..steps). UNAVAILABLE when `to` has no owner.
  Result<Owners> Owner(std::uint64_t key_hash, std::uint32_t step) const;

  // The step at which a moving key moves, 1..steps.
  std::uint32_t StepOf(std::uint64_t key_hash) const;

  std::uint32_t steps() const { return steps_; }
  const RouterSnapshot& from() const { return *from_; }
  const RouterSnapshot& to() const { return *to_; }

 private:
  std::shared_ptr<const RouterSnapshot> from_;
  std::shared_ptr<const RouterSnapshot> to_;
  std::uint32_t steps_;
  // For each position in `from`'s table, the same endpoint's position in `to`'s where it still
  // owns keys (else nullopt): computed once, so a pick compares positions, not ids.
  std::vector<std::optional<std::size_t>> in_to_;
};

// The key's owner in a snapshot (Maglev when built, else the ring).
Result<std::size_t> KeyOwner(const RouterSnapshot& snapshot, std::uint64_t key_hash);
// The members a key can land on in that table, counted when it was built (0 without one).
std::size_t KeyMembers(const RouterSnapshot& snapshot);

}  // namespace drover::router
