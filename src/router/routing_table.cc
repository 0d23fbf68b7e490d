#include <algorithm>

#include "drover/router.h"

namespace drover::router {

Result<std::shared_ptr<const RoutingTable>> RoutingTable::Create(std::uint64_t version,
                                                                 std::vector<Endpoint> endpoints) {
  // Picks return 32-bit indices; far beyond any fleet a single table describes.
  if (endpoints.size() > (1u << 24)) {
    return InvalidArgumentError("routing table: too many endpoints (" +
                                std::to_string(endpoints.size()) + ")");
  }
  std::sort(endpoints.begin(), endpoints.end(),
            [](const Endpoint& a, const Endpoint& b) { return a.id < b.id; });
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    if (endpoints[i].id.empty()) {
      return InvalidArgumentError("routing table: endpoint with an empty id (address '" +
                                  endpoints[i].address + "')");
    }
    if (i > 0 && endpoints[i].id == endpoints[i - 1].id) {
      return InvalidArgumentError("routing table: duplicate endpoint id '" + endpoints[i].id + "'");
    }
  }
  return std::shared_ptr<const RoutingTable>(new RoutingTable(version, std::move(endpoints)));
}

std::optional<std::size_t> RoutingTable::IndexOf(std::string_view id) const {
  auto it = std::lower_bound(endpoints_.begin(), endpoints_.end(), id,
                             [](const Endpoint& e, std::string_view v) { return e.id < v; });
  if (it == endpoints_.end() || it->id != id) return std::nullopt;
  return static_cast<std::size_t>(it - endpoints_.begin());
}

}  // namespace drover::router
