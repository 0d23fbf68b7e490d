// Shared pieces of the key-affine pickers: load validation and the bounded-load walk over a
// picker's own successor sequence. Internal to src/router.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "drover/router.h"

namespace drover::router::internal {

Status CheckLoads(const LoadView& loads, std::size_t table_size, const BoundedLoadOptions& options);

// Returns the first index produced by `next` (a callable returning std::optional<uint32_t>, empty
// when the sequence is exhausted) that accepts new work and is under its bounded-load cap.
template <typename Next>
Result<std::size_t> FirstUnderCap(Next next, const std::vector<std::uint32_t>& weight,
                                  const std::vector<std::uint8_t>& accepting,
                                  std::uint64_t total_weight, const LoadView& loads, double c) {
  while (std::optional<std::uint32_t> index = next()) {
    const std::uint32_t i = *index;
    if (!accepting[i]) continue;
    if (loads.loads[i] < BoundedLoadCap(c, loads.total, weight[i], total_weight)) return i;
  }
  return UnavailableError("bounded load: every endpoint is at its cap or not accepting");
}

}  // namespace drover::router::internal
