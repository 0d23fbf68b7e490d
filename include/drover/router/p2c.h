// Load-aware picking for new connections (RT-3): slow start and P2cPicker, power of two choices
// least-connections over a table's Routable() endpoints. A P2cPicker owns its member list, built
// from a table it does not keep (picks return table indices); the caller owns the loads and the
// RandomSource it passes to each pick. Immutable after Build(); thread-safe to read (the
// RandomSource must not be shared between threads).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "drover/clock.h"
#include "drover/router/random.h"
#include "drover/router/routing_table.h"
#include "drover/status.h"

namespace drover::router {

struct SlowStartOptions {
  Duration window = std::chrono::seconds(30);  // zero disables slow start
  double min_weight_percent = 10.0;            // effective weight at the moment of READY
  double aggression = 1.0;                     // 1.0 = linear ramp; > 1 ramps faster early
};

// Effective-weight multiplier in [min, 1] for an endpoint READY for `since_ready`:
// max(min, (since_ready / window) ^ (1 / aggression)), where min = min_weight_percent / 100
// clamped to [0.01, 1] (a floor above zero keeps every score finite).
double SlowStartFactor(Duration since_ready, const SlowStartOptions& options);

// Power-of-two-choices least-connections over a table's Routable() endpoints: draws two distinct
// members uniformly and keeps the one with the lower (load + 1) / effective_weight, where the
// effective weight is weight * SlowStartFactor. Immutable after Build(); thread-safe to read
// (the RandomSource passed to Pick must not be shared between threads).
class P2cPicker {
 public:
  static P2cPicker Build(const RoutingTable& table, const SlowStartOptions& options = {});

  // loads[i] is the active connection count of table endpoint i. UNAVAILABLE when no endpoint
  // is routable.
  Result<std::size_t> Pick(std::span<const std::uint64_t> loads, MonoTime now,
                           RandomSource& random) const;

  // weight * SlowStartFactor for a table endpoint (0 for non-members).
  double EffectiveWeight(std::size_t table_index, MonoTime now) const;
  std::size_t members() const { return members_.size(); }

 private:
  struct Member {
    std::uint32_t index;  // into the table
    double weight;
    std::optional<MonoTime> ready_since;
  };
  double EffectiveWeightOf(const Member& m, MonoTime now) const;

  std::vector<Member> members_;
  std::size_t table_size_ = 0;
  SlowStartOptions options_;
};

}  // namespace drover::router
