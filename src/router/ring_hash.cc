#include <algorithm>
#include <bit>
#include <numeric>

#include "drover/router.h"
#include "router/member_view.h"

namespace drover::router {
namespace {

constexpr std::uint64_t kRingSeed = kHashSeed ^ 0x7269'6e67'0000'0000ULL;  // "ring"
constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
constexpr int kMaxBucketBits = 24;

}  // namespace

RingHash RingHash::Build(const RoutingTable& table, const RingHashOptions& options) {
  RingHash ring;
  ring.members_ = internal::MemberView::FromTable(table);
  const std::uint64_t vnodes = std::max<std::uint32_t>(options.vnodes_per_weight, 1);
  // 128-bit products: vnodes * weight can exceed 64 bits with large weights and options.
  const Uint128 wanted = static_cast<Uint128>(vnodes) * ring.members_.total_weight;
  const std::uint64_t max_points = std::max<std::uint32_t>(options.max_points, 1);

  struct Point {
    std::uint64_t hash;
    std::uint32_t owner;
  };
  std::vector<Point> points;
  points.reserve(static_cast<std::size_t>(std::min<Uint128>(wanted, max_points)) +
                 ring.members_.count);
  for (std::uint32_t i = 0; i < table.size(); ++i) {
    const std::uint32_t w = ring.members_.weight[i];
    if (w == 0) continue;
    Uint128 n = static_cast<Uint128>(vnodes) * w;
    if (wanted > max_points) n = std::max<Uint128>(1, n * max_points / wanted);
    const std::string& id = table.endpoints()[i].id;
    for (std::uint64_t r = 0; r < static_cast<std::uint64_t>(n); ++r) {
      points.push_back({HashWithSeed(id, kRingSeed + r * kGolden), i});
    }
  }
  // Ties (vanishingly rare) resolve by table index, i.e. by endpoint id: deterministic.
  std::sort(points.begin(), points.end(), [](const Point& a, const Point& b) {
    return a.hash != b.hash ? a.hash < b.hash : a.owner < b.owner;
  });
  ring.hashes_.reserve(points.size());
  ring.owners_.reserve(points.size());
  for (const Point& p : points) {
    ring.hashes_.push_back(p.hash);
    ring.owners_.push_back(p.owner);
  }

  // Prefix index: about one point per bucket, so a lookup is one index read plus a short scan
  // instead of a binary search over the whole ring.
  if (!points.empty()) {
    ring.bucket_bits_ =
        std::clamp(static_cast<int>(std::bit_width(points.size() - 1)), 1, kMaxBucketBits);
    const std::size_t buckets = std::size_t{1} << ring.bucket_bits_;
    ring.bucket_start_.assign(buckets + 1, 0);
    std::size_t p = 0;
    for (std::size_t b = 0; b < buckets; ++b) {
      while (p < points.size() && (points[p].hash >> (64 - ring.bucket_bits_)) < b) ++p;
      ring.bucket_start_[b] = static_cast<std::uint32_t>(p);
    }
    ring.bucket_start_[buckets] = static_cast<std::uint32_t>(points.size());
  }
  return ring;
}

std::size_t RingHash::FirstPointAtOrAfter(std::uint64_t key_hash) const {
  const std::uint64_t bucket = key_hash >> (64 - bucket_bits_);
  std::size_t i = bucket_start_[bucket];
  const std::size_t end = bucket_start_[bucket + 1];
  while (i < end && hashes_[i] < key_hash) ++i;
  // Past the last point of this bucket: the next bucket's first point, or wrap to the start.
  return i == hashes_.size() ? 0 : i;
}

Result<std::size_t> RingHash::Walk(std::uint64_t key_hash, const LoadView* loads, double c) const {
  const std::size_t start = hashes_.empty() ? 0 : FirstPointAtOrAfter(key_hash);
  return internal::WalkSuccessors(
      "ring hash", start, owners_.size(), [this](std::size_t p) { return owners_[p]; }, members_,
      loads, c);
}

Result<std::size_t> RingHash::Pick(std::uint64_t key_hash) const {
  return Walk(key_hash, nullptr, 0);
}

Result<std::size_t> RingHash::PickBounded(std::uint64_t key_hash, const LoadView& loads,
                                          const BoundedLoadOptions& options) const {
  DROVER_RETURN_IF_ERROR(internal::CheckLoads(loads, members_.weight.size(), options));
  return Walk(key_hash, &loads, options.c);
}

std::vector<double> RingHash::Shares() const {
  std::vector<double> shares(members_.weight.size(), 0.0);
  if (hashes_.empty()) return shares;
  if (hashes_.size() == 1) {
    shares[owners_[0]] = 1.0;
    return shares;
  }
  // Point i owns the arc (hashes_[i-1], hashes_[i]]; unsigned subtraction wraps for i = 0.
  for (std::size_t i = 0; i < hashes_.size(); ++i) {
    const std::uint64_t prev = hashes_[i == 0 ? hashes_.size() - 1 : i - 1];
    shares[owners_[i]] += static_cast<double>(hashes_[i] - prev) * 0x1.0p-64;
  }
  return shares;
}

}  // namespace drover::router
