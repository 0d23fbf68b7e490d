// Shared pieces of the key-affine pickers: load validation and the walk over a picker's own
// successor sequence. Internal to src/router.
#pragma once

#include <cstdint>
#include <string>

#include "drover/router.h"

namespace drover::router::internal {

Status CheckLoads(const LoadView& loads, std::size_t table_size, const BoundedLoadOptions& options);

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
  std::size_t p = start;
  for (std::size_t step = 0; step < length; ++step) {
    const std::uint32_t i = owner_at(p);
    if (members.accepting[i] &&
        (loads == nullptr || loads->loads[i] < BoundedLoadCap(c, loads->total, members.weight[i],
                                                              members.total_weight))) {
      return i;
    }
    if (++p == length) p = 0;
  }
  return UnavailableError(std::string(picker) +
                          (loads == nullptr
                               ? ": no endpoint is accepting new work"
                               : ": every endpoint is at its bounded-load cap or not accepting"));
}

}  // namespace drover::router::internal
