// How a deploy rolls over the fleet, as pure functions (tested without processes):
//
// - Amounts: `max_surge`, `max_unavailable` and `canary` are a count ("2") or a percent of the
//   instances ("25%"). Percentages round as Kubernetes does: surge and canary up, unavailable
//   down. Surge and unavailable both 0 is refused (nothing could ever move).
// - Placement: the new instances are spread evenly over the hosts -- over zones first when hosts
//   carry one, then over the hosts of a zone -- each going to the zone, then the host, with the
//   fewest new instances so far (ties: the name), never beyond a host's capacity (0: no limit),
//   which counts the instances of other services already on it.
// - Batches: each new instance replaces an old one on the same host when there is one (a pair),
//   so a host's load stays level, else one left over on another host; pairs are ordered host by
//   host, so a batch touches as few hosts as it can, and additions (the target grew) follow. A
//   batch of k items first stops max(0, k - surge) of its old instances, starts its k new ones,
//   gates them, and then stops the rest of its old ones: at most `surge` instances above the target
//   run at once, and the READY count never drops below instances - max_unavailable. Batch size is
//   surge + unavailable; a canary batch (if any) goes first. Old instances left without a pair (the
//   target shrank) go after the last batch passed.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/status.h"

namespace drover::rollout {

// A count, or a percent of the target instance count.
struct Amount {
  int value = 0;
  bool percent = false;

  std::string ToString() const;  // "2", "25%"
  friend bool operator==(const Amount&, const Amount&) = default;
};

// "3" or "25%" (0..100%); INVALID_ARGUMENT naming `what` otherwise.
Result<Amount> ParseAmount(std::string_view text, std::string_view what);

struct Strategy {
  int instances = 1;
  Amount max_surge{25, true};
  Amount max_unavailable{0, false};
  std::optional<Amount> canary;
};

// The amounts as counts for `instances`.
struct Budget {
  int surge = 0;
  int unavailable = 0;
  int canary = 0;  // 0: no canary batch
  int batch() const { return surge + unavailable; }
};

// INVALID_ARGUMENT when the strategy cannot move (both 0), when unavailable would take every
// instance down, or when a canary batch is larger than a batch may be.
Result<Budget> ResolveBudget(const Strategy& strategy);

// A host as placement sees it.
struct PlacementHost {
  std::string name;
  std::string zone;  // "" when unlabelled
  int capacity = 0;  // instances it accepts in all; 0: no limit
  int others = 0;    // instances of other services on it now
};

// The host index of each of `count` new instances, or RESOURCE_EXHAUSTED naming the shortfall.
Result<std::vector<std::size_t>> Place(const std::vector<PlacementHost>& hosts, int count);

// One step of a batch: a new instance (index into the new ones), the old one it replaces (index
// into the old ones), or both.
struct BatchItem {
  std::optional<std::size_t> fresh;
  std::optional<std::size_t> old;
};

struct Batch {
  std::vector<BatchItem> items;
  bool canary = false;
  // How many of the items' old instances are stopped before the new ones start.
  std::size_t stop_first = 0;
};

struct Plan {
  std::vector<Batch> batches;
  std::vector<std::size_t> removals;  // old instances without a pair, stopped at the end
};

// The batches that replace `old_hosts` (the host of each old instance) by new instances on
// `new_hosts` (the host of each new one), under `budget`.
Plan PlanBatches(const std::vector<std::size_t>& new_hosts,
                 const std::vector<std::size_t>& old_hosts, const Budget& budget);

}  // namespace drover::rollout
