// Ring hash (RT-4): a consistent-hash ring with virtual nodes that maps a key's 64-bit hash to an
// owner among a table's KeyEligible() endpoints, with an optional bounded-load pick. A RingHash
// owns its points and member view, built from a table it does not keep (picks return table
// indices). Immutable after Build(); thread-safe to read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "drover/router/bounded_load.h"
#include "drover/router/routing_table.h"
#include "drover/status.h"

namespace drover::router {

struct RingHashOptions {
  std::uint32_t vnodes_per_weight = 256;  // ring points per unit of weight
  std::uint32_t max_points = 1u << 22;    // weights are scaled down beyond this
};

// Consistent-hash ring with virtual nodes over a table's KeyEligible() endpoints. Immutable after
// Build(); thread-safe to read.
class RingHash {
 public:
  static RingHash Build(const RoutingTable& table, const RingHashOptions& options = {});

  // The first accepting owner clockwise from `key_hash`. UNAVAILABLE when there is none.
  Result<std::size_t> Pick(std::uint64_t key_hash) const;
  // Bounded load: the first accepting owner clockwise whose load is under its cap.
  Result<std::size_t> PickBounded(std::uint64_t key_hash, const LoadView& loads,
                                  const BoundedLoadOptions& options = {}) const;

  // Exact fraction of the 64-bit hash space each table endpoint owns (0 for non-members).
  std::vector<double> Shares() const;
  std::size_t points() const { return hashes_.size(); }
  // Point i in ring order (i < points()): its hash and the table index owning it.
  std::uint64_t point_hash(std::size_t i) const { return hashes_[i]; }
  std::uint32_t point_owner(std::size_t i) const { return owners_[i]; }
  std::size_t members() const { return members_.count; }
  std::uint64_t total_weight() const { return members_.total_weight; }

 private:
  std::size_t FirstPointAtOrAfter(std::uint64_t key_hash) const;
  // Pick (loads == nullptr) and PickBounded share one walk clockwise from the key.
  Result<std::size_t> Walk(std::uint64_t key_hash, const LoadView* loads, double c) const;

  std::vector<std::uint64_t> hashes_;        // sorted point hashes
  std::vector<std::uint32_t> owners_;        // table index owning hashes_[i]
  std::vector<std::uint32_t> bucket_start_;  // first point whose top `bucket_bits_` bits >= b
  int bucket_bits_ = 0;
  internal::MemberView members_;
};

}  // namespace drover::router
