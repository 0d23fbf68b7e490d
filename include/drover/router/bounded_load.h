// Loads and bounded load (RT-4), shared by the key-affine pickers (RingHash, Maglev): the load
// view a caller passes to PickBounded(), the bounded-load factor, the cap it gives each member,
// and the member view (weights, acceptance, totals) a picker builds from its table. Plain values
// and a pure function: a LoadView borrows the caller's counters for the duration of one pick;
// a MemberView owns its vectors. Thread-safe to read; nothing here synchronises writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "drover/router/routing_table.h"

namespace drover::router {

// Current load per table endpoint (loads[i] belongs to table endpoint i of the snapshot being
// picked on -- positions shift between table versions, so counters must be re-indexed when a new
// snapshot is taken) and their sum over the picker's members. Plain values: the caller snapshots
// its counters before picking. Fewer loads than endpoints is INVALID_ARGUMENT.
struct LoadView {
  std::span<const std::uint64_t> loads;
  std::uint64_t total = 0;
};

struct BoundedLoadOptions {
  double c = 1.25;  // finite, >= 1: an endpoint takes at most ceil(c * (total + 1) * w / W)
};

// The cap of one member: ceil(c * (total + 1) * weight / total_weight), saturating near 2^63.
std::uint64_t BoundedLoadCap(double c, std::uint64_t total_load, std::uint32_t weight,
                             std::uint64_t total_weight);

namespace internal {
// Which table endpoints a key-affine picker has as members: per table index, the weight (0 for
// non-members) and whether it accepts new work; plus totals over the members.
struct MemberView {
  std::vector<std::uint32_t> weight;
  std::vector<std::uint8_t> accepting;
  std::size_t count = 0;
  std::size_t accepting_count = 0;
  std::uint64_t total_weight = 0;

  static MemberView FromTable(const RoutingTable& table);
};
}  // namespace internal

}  // namespace drover::router
