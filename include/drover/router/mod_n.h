// ModN: hash % n over a table's KeyEligible() endpoints -- the baseline the benchmarks compare the
// key-affine pickers against, to show how many keys a membership change moves without them. A ModN
// owns its member list, built from a table it does not keep. Immutable after Build(); thread-safe
// to read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "drover/router/routing_table.h"
#include "drover/status.h"

namespace drover::router {

// hash % n over KeyEligible() endpoints: the baseline that shows why the others exist.
class ModN {
 public:
  static ModN Build(const RoutingTable& table);
  Result<std::size_t> Pick(std::uint64_t key_hash) const;

 private:
  std::vector<std::uint32_t> members_;  // table indices
};

}  // namespace drover::router
