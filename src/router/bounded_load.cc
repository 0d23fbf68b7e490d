#include <cmath>

#include "drover/router.h"
#include "router/member_view.h"

namespace drover::router {

std::uint64_t BoundedLoadCap(double c, std::uint64_t total_load, std::uint32_t weight,
                             std::uint64_t total_weight) {
  if (total_weight == 0 || weight == 0) return 0;
  constexpr double kSaturated = 9.2e18;  // just under 2^63: the cast below stays defined
  // Multiply before dividing so that exact cases (c = 1.25, total + 1 = 10^6, w / W = 1 / 100)
  // stay exact in floating point and ceil() does not round them up by one.
  const double cap = c * static_cast<double>(total_load + 1) * static_cast<double>(weight) /
                     static_cast<double>(total_weight);
  // c = 1.1 is not exact in binary and would round some exact caps up by one; a relative
  // 1e-12 below keeps the cap the user meant.
  const double rounded = std::ceil(cap * (1.0 - 1e-12));
  return rounded >= kSaturated || std::isnan(rounded) ? static_cast<std::uint64_t>(kSaturated)
                                                      : static_cast<std::uint64_t>(rounded);
}

namespace internal {

MemberView MemberView::FromTable(const RoutingTable& table) {
  MemberView view;
  view.weight.assign(table.size(), 0);
  view.accepting.assign(table.size(), 0);
  for (std::size_t i = 0; i < table.size(); ++i) {
    const Endpoint& e = table.endpoints()[i];
    if (!e.KeyEligible()) continue;
    view.weight[i] = e.weight;
    view.accepting[i] = e.accepting ? 1 : 0;
    view.accepting_count += e.accepting ? 1 : 0;
    view.total_weight += e.weight;
    ++view.count;
  }
  return view;
}

Status CheckLoads(const LoadView& loads, std::size_t table_size,
                  const BoundedLoadOptions& options) {
  if (loads.loads.size() < table_size) {
    return InvalidArgumentError("bounded load: " + std::to_string(loads.loads.size()) +
                                " loads given for " + std::to_string(table_size) + " endpoints");
  }
  if (!(options.c >= 1.0) || !std::isfinite(options.c)) {
    return InvalidArgumentError("bounded load: factor c must be finite and >= 1, got " +
                                std::to_string(options.c));
  }
  return Status::Ok();
}

bool AnyUnderCap(const MemberView& members, const LoadView& loads, double c) {
  for (std::size_t i = 0; i < members.weight.size(); ++i) {
    if (members.weight[i] > 0 && members.accepting[i] &&
        loads.loads[i] < BoundedLoadCap(c, loads.total, members.weight[i], members.total_weight)) {
      return true;
    }
  }
  return false;
}

}  // namespace internal
}  // namespace drover::router
