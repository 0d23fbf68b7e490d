#include <algorithm>
#include <limits>

#include "drover/router.h"
#include "router/member_view.h"

namespace drover::router {
namespace {

constexpr std::uint64_t kOffsetSeed = kHashSeed ^ 0x6d61'676c'0000'0001ULL;  // "magl"
constexpr std::uint64_t kSkipSeed = kHashSeed ^ 0x6d61'676c'0000'0002ULL;
constexpr std::uint32_t kEmpty = std::numeric_limits<std::uint32_t>::max();

bool IsPrime(std::uint64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  for (std::uint64_t d = 3; d * d <= n; d += 2) {
    if (n % d == 0) return false;
  }
  return true;
}

}  // namespace

std::uint64_t NextPrime(std::uint64_t n) {
  if (n <= 2) return 2;
  while (!IsPrime(n)) ++n;
  return n;
}

std::uint64_t MaglevTableSize(std::size_t members, const MaglevOptions& options) {
  // Bounded so that a table always fits the 32-bit slot arithmetic and memory of one process.
  const std::uint64_t cap =
      std::clamp<std::uint64_t>(options.max_table_size, 65537, std::uint64_t{1} << 30);
  if (options.table_size != 0)
    return NextPrime(std::clamp<std::uint64_t>(options.table_size, 2, cap));
  const Uint128 by_members = static_cast<Uint128>(options.entries_per_member) * members;
  const std::uint64_t wanted = std::max<std::uint64_t>(
      options.min_table_size, static_cast<std::uint64_t>(std::min<Uint128>(by_members, cap)));
  std::uint64_t step = 65536;
  while (step < cap && NextPrime(step) < wanted) step *= 2;
  return NextPrime(std::min(step, cap));
}

Maglev Maglev::Build(const RoutingTable& table, const MaglevOptions& options) {
  Maglev maglev;
  maglev.members_ = internal::MemberView::FromTable(table);
  if (maglev.members_.count == 0) return maglev;

  const std::uint64_t m = MaglevTableSize(maglev.members_.count, options);

  // Each member walks its own permutation of the slots (offset, offset + skip, ...) and claims
  // the next free slot when it has a turn. Turns are handed out in proportion to weight: member
  // i's k-th turn comes at time k * max_weight / weight_i, ties going to the lower table index, so
  // equal weights give the paper's round robin and every turn fills a slot (O(M log N) in all,
  // however skewed the weights).
  struct Walker {
    std::uint32_t index;
    std::uint64_t position;
    std::uint64_t skip;
    double interval;  // time between turns: max_weight / weight
    std::uint64_t turns = 0;
    double next_turn() const { return static_cast<double>(turns + 1) * interval; }
  };
  std::uint32_t max_weight = 0;
  for (std::uint32_t w : maglev.members_.weight) max_weight = std::max(max_weight, w);
  std::vector<Walker> walkers;
  walkers.reserve(maglev.members_.count);
  for (std::uint32_t i = 0; i < table.size(); ++i) {
    const std::uint32_t w = maglev.members_.weight[i];
    if (w == 0) continue;
    const std::string& id = table.endpoints()[i].id;
    walkers.push_back({i, HashWithSeed(id, kOffsetSeed) % m,
                       HashWithSeed(id, kSkipSeed) % (m - 1) + 1,
                       static_cast<double>(max_weight) / static_cast<double>(w)});
  }
  // Min-heap of walker positions in `walkers`, by (next turn, table index).
  auto later = [&walkers](std::uint32_t a, std::uint32_t b) {
    const double ta = walkers[a].next_turn(), tb = walkers[b].next_turn();
    return ta != tb ? ta > tb : walkers[a].index > walkers[b].index;
  };
  std::vector<std::uint32_t> heap(walkers.size());
  for (std::uint32_t i = 0; i < heap.size(); ++i) heap[i] = i;
  std::make_heap(heap.begin(), heap.end(), later);

  maglev.lookup_.assign(m, kEmpty);
  for (std::uint64_t filled = 0; filled < m; ++filled) {
    std::pop_heap(heap.begin(), heap.end(), later);
    Walker& walker = walkers[heap.back()];
    while (maglev.lookup_[walker.position] != kEmpty) {
      walker.position += walker.skip;
      if (walker.position >= m) walker.position -= m;
    }
    maglev.lookup_[walker.position] = walker.index;
    ++walker.turns;
    std::push_heap(heap.begin(), heap.end(), later);
  }
  return maglev;
}

Result<std::size_t> Maglev::Walk(std::uint64_t key_hash, const LoadView* loads, double c) const {
  // Successors of a slot are the following slots: their owners are spread pseudo-randomly, so a
  // full owner's keys spill over many members instead of onto one neighbour.
  return internal::WalkSuccessors(
      "maglev", ReduceToRange(key_hash, lookup_.size()), lookup_.size(),
      [this](std::size_t slot) { return lookup_[slot]; }, members_, loads, c);
}

Result<std::size_t> Maglev::Pick(std::uint64_t key_hash) const {
  return Walk(key_hash, nullptr, 0);
}

Result<std::size_t> Maglev::PickBounded(std::uint64_t key_hash, const LoadView& loads,
                                        const BoundedLoadOptions& options) const {
  DROVER_RETURN_IF_ERROR(internal::CheckLoads(loads, members_.weight.size(), options));
  return Walk(key_hash, &loads, options.c);
}

std::vector<double> Maglev::Shares() const {
  std::vector<double> shares(members_.weight.size(), 0.0);
  if (lookup_.empty()) return shares;
  for (std::uint32_t owner : lookup_) shares[owner] += 1.0;
  for (double& s : shares) s /= static_cast<double>(lookup_.size());
  return shares;
}

}  // namespace drover::router
