#include "drover/router/migration.h"

#include <algorithm>

namespace drover::router {
namespace {

// A key's step comes from its hash, remixed so that it does not follow the bits the pickers use
// (SplitMix64's finaliser).
std::uint64_t Remix(std::uint64_t h) {
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

}  // namespace

Result<std::size_t> KeyOwner(const RouterSnapshot& snapshot, std::uint64_t key_hash) {
  if (snapshot.maglev) return snapshot.maglev->Pick(key_hash);
  if (snapshot.ring) return snapshot.ring->Pick(key_hash);
  return FailedPreconditionError("KeyOwner: the snapshot has no ring or Maglev table");
}

std::size_t KeyMembers(const RouterSnapshot& snapshot) {
  if (snapshot.maglev) return snapshot.maglev->members();
  if (snapshot.ring) return snapshot.ring->members();
  return 0;
}

KeyMigration::KeyMigration(std::shared_ptr<const RouterSnapshot> from,
                           std::shared_ptr<const RouterSnapshot> to, std::uint32_t steps)
    : from_(std::move(from)), to_(std::move(to)), steps_(std::max<std::uint32_t>(steps, 1)) {
  in_to_.resize(from_->table->size());
  for (std::size_t i = 0; i < in_to_.size(); ++i) {
    const std::optional<std::size_t> j = to_->table->IndexOf(from_->table->at(i).id);
    if (j && to_->table->at(*j).KeyEligible()) in_to_[i] = j;
  }
}

std::uint32_t KeyMigration::StepOf(std::uint64_t key_hash) const {
  return 1 + static_cast<std::uint32_t>(Remix(key_hash) % steps_);
}

Result<KeyMigration::Owners> KeyMigration::Owner(std::uint64_t key_hash, std::uint32_t step) const {
  DROVER_ASSIGN_OR_RETURN(const std::size_t now, KeyOwner(*to_, key_hash));
  Owners out;
  out.owner = now;
  const Result<std::size_t> before = KeyOwner(*from_, key_hash);
  if (!before.ok()) return out;  // nothing owned keys before: nothing to hand off
  const std::optional<std::size_t> old = in_to_[*before];  // where its old owner is now
  if (old == now) return out;                              // stays
  out.moving = true;
  if (!old) return out;  // its old owner is gone: it moves at once, from nowhere
  if (std::min(step, steps_) >= StepOf(key_hash)) {
    out.previous = *old;
  } else {
    out.owner = *old;
  }
  return out;
}

}  // namespace drover::router
