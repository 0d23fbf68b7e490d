#include <algorithm>
#include <cmath>

#include "drover/router.h"

namespace drover::router {

double SlowStartFactor(Duration since_ready, const SlowStartOptions& options) {
  // A floor above zero keeps a brand-new endpoint pickable and every score finite.
  const double min_factor = std::clamp(options.min_weight_percent / 100.0, 0.01, 1.0);
  if (options.window <= Duration::zero() || since_ready >= options.window) return 1.0;
  if (since_ready <= Duration::zero()) return min_factor;
  const double progress = std::chrono::duration<double>(since_ready).count() /
                          std::chrono::duration<double>(options.window).count();
  const double aggression = options.aggression > 0.0 ? options.aggression : 1.0;
  const double ramp = aggression == 1.0 ? progress : std::pow(progress, 1.0 / aggression);
  return std::max(min_factor, ramp);
}

P2cPicker P2cPicker::Build(const RoutingTable& table, const SlowStartOptions& options) {
  P2cPicker picker;
  picker.options_ = options;
  picker.table_size_ = table.size();
  for (std::uint32_t i = 0; i < table.size(); ++i) {
    const Endpoint& e = table.endpoints()[i];
    if (!e.Routable()) continue;
    picker.members_.push_back({i, static_cast<double>(e.weight), e.ready_since});
  }
  return picker;
}

double P2cPicker::EffectiveWeightOf(const Member& m, MonoTime now) const {
  if (!m.ready_since) return m.weight;
  return m.weight * SlowStartFactor(now - *m.ready_since, options_);
}

double P2cPicker::EffectiveWeight(std::size_t table_index, MonoTime now) const {
  for (const Member& m : members_) {
    if (m.index == table_index) return EffectiveWeightOf(m, now);
  }
  return 0.0;
}

Result<std::size_t> P2cPicker::Pick(std::span<const std::uint64_t> loads, MonoTime now,
                                    RandomSource& random) const {
  const std::size_t n = members_.size();
  if (n == 0) return UnavailableError("p2c: no endpoint is READY and accepting");
  if (loads.size() < table_size_) {
    return InvalidArgumentError("p2c: " + std::to_string(loads.size()) + " loads given for " +
                                std::to_string(table_size_) + " endpoints");
  }
  if (n == 1) return members_[0].index;
  const std::size_t first = random.Uniform(n);
  // Second draw over the other n - 1 members, so the two candidates are always distinct.
  std::size_t second = random.Uniform(n - 1);
  if (second >= first) ++second;
  const Member& a = members_[first];
  const Member& b = members_[second];
  const std::uint64_t load_a = loads[a.index];
  const std::uint64_t load_b = loads[b.index];
  // Lower (load + 1) / effective weight wins: a ramping endpoint looks as loaded as a full-weight
  // one carrying 1 / factor times its connections, so it fills gradually instead of at once.
  const double score_a = static_cast<double>(load_a + 1) / EffectiveWeightOf(a, now);
  const double score_b = static_cast<double>(load_b + 1) / EffectiveWeightOf(b, now);
  return score_b < score_a ? b.index : a.index;
}

}  // namespace drover::router
