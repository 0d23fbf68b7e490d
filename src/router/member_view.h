// Shared pieces of the key-affine pickers: load validation and the walk over a picker's own
// successor sequence. Internal to src/router.
#pragma once

#include <cstdint>
#include <string>

#include "drover/router.h"

namespace drover::router::internal {

Status CheckLoads(const LoadView& loads, std::size_t table_size, const BoundedLoadOptions& options);

// Some member accepts new work and is under its bounded-load cap.
bool AnyUnderCap(const MemberView& members, const LoadView& loads, double c);

// Walks a picker's successor sequence -- `owner_at(p)` for positions start, start + 1, ...,
// wrapping at `length`, each visited once -- and returns the first owner that accepts new work
// and, when `loads` is set, is under its bounded-load cap for factor `c`. `picker` names the
// algorithm in errors.
template <typename OwnerAt>
Result<std::size_t> WalkSuccessors(const char* picker, std::size_t start, std::size_t length,
                                   OwnerAt owner_at, const MemberView& members,
                                   const LoadView* loads, double c) {
  if (length == 0) {
    return UnavailableError(std::string(picker) + ": no READY endpoint with weight > 0");
  }
  auto refuse = [&] {
    return UnavailableError(std::string(picker) +
                            (loads == nullptr
                                 ? ": no endpoint is accepting new work"
                                 : ": every endpoint is at its bounded-load cap or not accepting"));
  };
  // A full fleet must fail fast, not after visiting every ring point or table slot: after a
  // few probes per member, check once in O(members) whether any member can take the key at all.
  if (members.accepting_count == 0) return refuse();
  const std::size_t probes_before_check = 4 * members.count + 16;
  std::size_t p = start;
  for (std::size_t step = 0; step < length; ++step) {
    if (step == probes_before_check && loads != nullptr && !AnyUnderCap(members, *loads, c)) {
      return refuse();
    }
    const std::uint32_t i = owner_at(p);
    if (members.accepting[i] &&
        (loads == nullptr || loads->loads[i] < BoundedLoadCap(c, loads->total, members.weight[i],
                                                              members.total_weight))) {
      return i;
    }
    if (++p == length) p = 0;
  }
  return refuse();
}

}  // namespace drover::router::internal
