// Maglev (RT-4): the weighted Maglev lookup table that maps a key's 64-bit hash to an owner among
// a table's KeyEligible() endpoints with one array read, with an optional bounded-load pick; and
// how its table size is chosen. A Maglev owns its lookup table and member view, built from a
// routing table it does not keep (picks return table indices). Immutable after Build();
// thread-safe to read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "drover/router/bounded_load.h"
#include "drover/router/routing_table.h"
#include "drover/status.h"

namespace drover::router {

struct MaglevOptions {
  // Fixed table size (rounded up to a prime, at most max_table_size). Set it per service to pin
  // M for good.
  std::uint64_t table_size = 0;
  // With table_size 0, M is the first prime above 65536 * 2^k for the smallest k with
  // M >= max(min_table_size, entries_per_member * members), at most max_table_size. M must not
  // follow every membership change -- a new M remaps nearly every key -- so it moves along this
  // ladder, only when the member count crosses a doubling.
  std::uint64_t min_table_size = 65537;
  // The Maglev paper's M >= 100 * N bounds imbalance to 1%, but measured key movement on adding
  // or removing one of 100 members is then ~1.6x the ideal 1/N; >= 2500 * N brings it to
  // ~1.25x or less (docs/ARCHITECTURE.md, "Maglev table size"; `drover bench router` shows both).
  std::uint64_t entries_per_member = 2500;
  std::uint64_t max_table_size = std::uint64_t{1} << 22;  // 4194319 entries, 16 MiB; <= 2^30
};

// The table size Maglev::Build uses for `members` members under `options`.
std::uint64_t MaglevTableSize(std::size_t members, const MaglevOptions& options);

// Maglev lookup table (Eisenbud et al., NSDI 2016), weighted, over a table's KeyEligible()
// endpoints. Built once per table off the hot path; a pick is one hash and one array read.
// Immutable after Build(); thread-safe to read.
class Maglev {
 public:
  static Maglev Build(const RoutingTable& table, const MaglevOptions& options = {});

  Result<std::size_t> Pick(std::uint64_t key_hash) const;
  // Bounded load: walks the lookup table from the key's slot to the first accepting owner under
  // its cap.
  Result<std::size_t> PickBounded(std::uint64_t key_hash, const LoadView& loads,
                                  const BoundedLoadOptions& options = {}) const;

  // Exact fraction of the lookup table each table endpoint owns.
  std::vector<double> Shares() const;
  std::size_t table_size() const { return lookup_.size(); }
  std::size_t members() const { return members_.count; }
  std::uint64_t total_weight() const { return members_.total_weight; }

 private:
  // Pick (loads == nullptr) and PickBounded share one walk over the slots from the key's slot.
  Result<std::size_t> Walk(std::uint64_t key_hash, const LoadView* loads, double c) const;

  std::vector<std::uint32_t> lookup_;  // slot -> table index
  internal::MemberView members_;
};

// Smallest prime >= n (n >= 2).
std::uint64_t NextPrime(std::uint64_t n);

}  // namespace drover::router
