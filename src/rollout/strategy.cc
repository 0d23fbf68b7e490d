#include "rollout/strategy.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

namespace drover::rollout {

std::string Amount::ToString() const { return std::to_string(value) + (percent ? "%" : ""); }

Result<Amount> ParseAmount(std::string_view text, std::string_view what) {
  Amount amount;
  std::string_view digits = text;
  if (!digits.empty() && digits.back() == '%') {
    amount.percent = true;
    digits.remove_suffix(1);
  }
  const auto [end, error] =
      std::from_chars(digits.data(), digits.data() + digits.size(), amount.value);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() ||
      amount.value < 0 || (amount.percent && amount.value > 100)) {
    return InvalidArgumentError(std::string(what) + " is '" + std::string(text) +
                                "'; give a count (2) or a percent of the instances (25%)");
  }
  return amount;
}

namespace {

int Count(const Amount& a, int instances, bool round_up) {
  if (!a.percent) return a.value;
  const long long scaled = static_cast<long long>(a.value) * instances;
  return static_cast<int>(round_up ? (scaled + 99) / 100 : scaled / 100);
}

}  // namespace

Result<Budget> ResolveBudget(const Strategy& s) {
  if (s.instances < 1) return InvalidArgumentError("instances must be at least 1");
  Budget b;
  b.surge = Count(s.max_surge, s.instances, /*round_up=*/true);
  b.unavailable = std::min(Count(s.max_unavailable, s.instances, /*round_up=*/false), s.instances);
  if (b.surge == 0 && b.unavailable == 0) {
    return InvalidArgumentError("max_surge " + s.max_surge.ToString() + " and max_unavailable " +
                                s.max_unavailable.ToString() + " of " +
                                std::to_string(s.instances) +
                                " instances are both 0: no instance could ever be replaced");
  }
  if (s.canary) {
    b.canary =
        std::max(Count(*s.canary, s.instances, /*round_up=*/true), s.canary->value > 0 ? 1 : 0);
    if (b.canary >= s.instances) {
      return InvalidArgumentError("canary " + s.canary->ToString() + " of " +
                                  std::to_string(s.instances) +
                                  " instances is all of them; a canary is a few");
    }
    if (b.canary > b.batch()) {
      return InvalidArgumentError("canary " + std::to_string(b.canary) +
                                  " is more than a batch may replace (max_surge + "
                                  "max_unavailable = " +
                                  std::to_string(b.batch()) + ")");
    }
  }
  return b;
}

Result<std::vector<std::size_t>> Place(const std::vector<PlacementHost>& hosts, int count) {
  std::vector<int> placed(hosts.size(), 0);
  std::map<std::string, int> per_zone;
  for (const PlacementHost& h : hosts) per_zone.emplace(h.zone, 0);
  std::vector<std::size_t> out;
  for (int n = 0; n < count; ++n) {
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      const PlacementHost& h = hosts[i];
      if (h.capacity > 0 && h.others + placed[i] >= h.capacity) continue;
      if (!best) {
        best = i;
        continue;
      }
      const PlacementHost& b = hosts[*best];
      const auto key = [&](std::size_t j, const PlacementHost& x) {
        return std::tuple(per_zone[x.zone], x.zone, placed[j], x.name);
      };
      if (key(i, h) < key(*best, b)) best = i;
    }
    if (!best) {
      return ResourceExhaustedError(
          "the hosts have room for " + std::to_string(n) + " of " + std::to_string(count) +
          " instances (their --capacity, counting other services' instances)");
    }
    ++placed[*best];
    ++per_zone[hosts[*best].zone];
    out.push_back(*best);
  }
  return out;
}

Plan PlanBatches(const std::vector<std::size_t>& new_hosts,
                 const std::vector<std::size_t>& old_hosts, const Budget& budget) {
  // Pair new with old on the same host; host by host, pairs before additions.
  std::set<std::size_t> host_order(new_hosts.begin(), new_hosts.end());
  host_order.insert(old_hosts.begin(), old_hosts.end());
  std::vector<BatchItem> items;
  std::vector<bool> old_used(old_hosts.size(), false);
  for (const std::size_t host : host_order) {
    std::vector<std::size_t> olds;
    for (std::size_t o = 0; o < old_hosts.size(); ++o) {
      if (old_hosts[o] == host) olds.push_back(o);
    }
    std::size_t next_old = 0;
    for (std::size_t f = 0; f < new_hosts.size(); ++f) {
      if (new_hosts[f] != host) continue;
      BatchItem item;
      item.fresh = f;
      if (next_old < olds.size()) {
        item.old = olds[next_old++];
        old_used[*item.old] = true;
      }
      items.push_back(item);
    }
  }
  // A new instance left without an old one on its host replaces one left over on another host
  // (the fleet moves between hosts); only then is it an addition, or the old one a removal.
  std::size_t spare = 0;
  for (BatchItem& item : items) {
    if (item.old) continue;
    while (spare < old_hosts.size() && old_used[spare]) ++spare;
    if (spare == old_hosts.size()) break;
    item.old = spare;
    old_used[spare] = true;
  }
  // Pairs first overall, so that the fleet's capacity stays level while additions wait.
  std::stable_partition(items.begin(), items.end(),
                        [](const BatchItem& i) { return i.old.has_value(); });
  Plan plan;
  for (std::size_t o = 0; o < old_hosts.size(); ++o) {
    if (!old_used[o]) plan.removals.push_back(o);
  }
  std::size_t next = 0;
  const auto cut = [&](std::size_t size, bool canary) {
    Batch batch;
    batch.canary = canary;
    for (; next < items.size() && batch.items.size() < size; ++next) {
      batch.items.push_back(items[next]);
    }
    std::size_t olds = 0;
    for (const BatchItem& i : batch.items) olds += i.old.has_value() ? 1 : 0;
    const std::size_t over = batch.items.size() > static_cast<std::size_t>(budget.surge)
                                 ? batch.items.size() - static_cast<std::size_t>(budget.surge)
                                 : 0;
    batch.stop_first = std::min(over, olds);
    plan.batches.push_back(std::move(batch));
  };
  if (budget.canary > 0 && !items.empty()) cut(static_cast<std::size_t>(budget.canary), true);
  while (next < items.size()) cut(static_cast<std::size_t>(std::max(budget.batch(), 1)), false);
  return plan;
}

}  // namespace drover::rollout
