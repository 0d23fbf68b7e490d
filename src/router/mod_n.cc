#include "drover/router.h"

namespace drover::router {

ModN ModN::Build(const RoutingTable& table) {
  ModN mod;
  for (std::uint32_t i = 0; i < table.size(); ++i) {
    if (table.endpoints()[i].KeyEligible()) mod.members_.push_back(i);
  }
  return mod;
}

Result<std::size_t> ModN::Pick(std::uint64_t key_hash) const {
  // The guard the seed's router lacked: n == 0 is an error, not a division by zero.
  if (members_.empty()) return UnavailableError("mod-n: no READY endpoint with weight > 0");
  return members_[key_hash % members_.size()];
}

}  // namespace drover::router
