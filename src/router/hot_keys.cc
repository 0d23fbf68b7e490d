#include "drover/hot_keys.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace drover::router {

// ---------------------------------------------------------------------------------------------
// SpaceSaving

SpaceSaving::SpaceSaving(std::size_t capacity)
    : capacity_(std::clamp<std::size_t>(capacity, 1, std::numeric_limits<std::uint32_t>::max())) {
  slots_.reserve(capacity_);
  heap_.reserve(capacity_);
  index_.reserve(capacity_);
}

void SpaceSaving::Place(std::uint32_t pos, std::uint32_t slot) {
  heap_[pos] = slot;
  slots_[slot].heap_pos = pos;
}

void SpaceSaving::SiftUp(std::uint32_t pos) {
  const std::uint32_t slot = heap_[pos];
  while (pos > 0) {
    const std::uint32_t parent = (pos - 1) / 2;
    if (!Less(slot, heap_[parent])) break;
    Place(pos, heap_[parent]);
    pos = parent;
  }
  Place(pos, slot);
}

void SpaceSaving::SiftDown(std::uint32_t pos) {
  const std::uint32_t slot = heap_[pos];
  const std::size_t n = heap_.size();
  while (true) {
    std::size_t child = 2 * static_cast<std::size_t>(pos) + 1;
    if (child >= n) break;
    if (child + 1 < n && Less(heap_[child + 1], heap_[child])) ++child;
    if (!Less(heap_[child], slot)) break;
    Place(pos, heap_[child]);
    pos = static_cast<std::uint32_t>(child);
  }
  Place(pos, slot);
}

void SpaceSaving::Add(std::string_view key, std::uint64_t weight) {
  if (weight == 0) return;  // would otherwise evict a counter without counting anything
  total_ += weight;

  if (auto it = index_.find(key); it != index_.end()) {
    Slot& slot = slots_[it->second];
    slot.count += weight;
    SiftDown(slot.heap_pos);  // a larger count can only move away from the root
    return;
  }

  if (slots_.size() < capacity_) {
    const auto id = static_cast<std::uint32_t>(slots_.size());
    slots_.push_back(Slot{std::string(key), weight, 0, 0});
    heap_.push_back(id);
    slots_[id].heap_pos = static_cast<std::uint32_t>(heap_.size() - 1);
    SiftUp(slots_[id].heap_pos);
    index_.emplace(slots_[id].key, id);
    return;
  }

  // Full: the new key takes over the counter with the smallest count. It may have occurred up to
  // that many times while unmonitored, which becomes its error.
  const std::uint32_t id = heap_[0];
  Slot& slot = slots_[id];
  index_.erase(slot.key);
  slot.key.assign(key);
  slot.error = slot.count;
  slot.count += weight;
  index_.emplace(slot.key, id);
  SiftDown(0);
}

void SpaceSaving::Halve() {
  std::uint64_t total = 0;
  for (Slot& slot : slots_) {
    // count' = ceil(count / 2) stays >= half the true frequency; the lower bound
    // floor((count - error) / 2) stays <= it.
    const std::uint64_t lower = (slot.count - slot.error) / 2;
    slot.count = slot.count / 2 + slot.count % 2;
    slot.error = slot.count - lower;
    total += slot.count;
  }
  // ceil is monotone, so the heap order survives and no re-heapify is needed.
  total_ = total;
}

void SpaceSaving::Clear() {
  slots_.clear();
  heap_.clear();
  index_.clear();
  total_ = 0;
}

std::vector<HeavyHitter> SpaceSaving::Sorted(std::vector<HeavyHitter> entries) const {
  std::sort(entries.begin(), entries.end(), [](const HeavyHitter& a, const HeavyHitter& b) {
    if (a.count != b.count) return a.count > b.count;
    return a.key < b.key;
  });
  return entries;
}

std::vector<HeavyHitter> SpaceSaving::Top(std::size_t n) const {
  std::vector<HeavyHitter> all;
  all.reserve(slots_.size());
  for (const Slot& slot : slots_) all.push_back({slot.key, slot.count, slot.error, false});
  all = Sorted(std::move(all));

  // Any key ranked below n -- monitored or not -- occurs at most `bound` times: the count of the
  // (n+1)-th entry, or the smallest count when every counter is in the answer and keys may have
  // been evicted (an unmonitored key occurs at most as often as the smallest count).
  std::uint64_t bound = 0;
  if (n < all.size()) {
    bound = all[n].count;
  } else if (slots_.size() == capacity_ && !all.empty()) {
    bound = all.back().count;
  }
  if (all.size() > n) all.resize(n);
  for (HeavyHitter& h : all) h.guaranteed = h.count - h.error >= bound;
  return all;
}

std::vector<HeavyHitter> SpaceSaving::Above(double fraction) const {
  const double threshold = fraction * static_cast<double>(total_);
  std::vector<HeavyHitter> out;
  for (const Slot& slot : slots_) {
    if (static_cast<double>(slot.count) > threshold) {
      const bool guaranteed = static_cast<double>(slot.count - slot.error) > threshold;
      out.push_back({slot.key, slot.count, slot.error, guaranteed});
    }
  }
  return Sorted(std::move(out));
}

// ---------------------------------------------------------------------------------------------
// HotKeyDetector

HotKeyDetector::HotKeyDetector(HotKeyDetectorOptions options)
    : options_(options), sketch_(options.capacity) {}

void HotKeyDetector::Record(std::string_view key, std::uint64_t weight) {
  MutexLock lock(mu_);
  sketch_.Add(key, weight);
  if (options_.halve_every == 0) return;
  since_halving_ += weight;
  // One huge weight must not hold the lock for millions of halvings: 64 halvings already bring
  // every 64-bit count to its floor.
  const std::uint64_t due = since_halving_ / options_.halve_every;
  for (std::uint64_t i = 0; i < std::min<std::uint64_t>(due, 64); ++i) sketch_.Halve();
  since_halving_ %= options_.halve_every;
}

std::vector<HeavyHitter> HotKeyDetector::HotKeys(double fraction) const {
  MutexLock lock(mu_);
  return sketch_.Above(fraction);
}

void HotKeyDetector::Reset() {
  MutexLock lock(mu_);
  sketch_.Clear();
  since_halving_ = 0;
}

std::uint64_t HotKeyDetector::total() const {
  MutexLock lock(mu_);
  return sketch_.total();
}

// ---------------------------------------------------------------------------------------------
// HotKeySpreader

HotKeySpreader::HotKeySpreader(std::vector<std::string> hot_keys, std::uint32_t replicas)
    : replicas_(std::max<std::uint32_t>(replicas, 1)) {
  // With one replica, "key#0" would only move the key to another owner without spreading it.
  if (replicas_ == 1) return;
  for (std::string& key : hot_keys) hot_.insert(std::move(key));
}

HotKeySpreader HotKeySpreader::FromHeavyHitters(const std::vector<HeavyHitter>& hitters,
                                                std::uint32_t replicas) {
  std::vector<std::string> keys;
  keys.reserve(hitters.size());
  for (const HeavyHitter& h : hitters) keys.push_back(h.key);
  return HotKeySpreader(std::move(keys), replicas);
}

std::string HotKeySpreader::SubKey(std::string_view key, std::uint32_t index) {
  std::string out;
  const std::string suffix = std::to_string(index);
  out.reserve(key.size() + 1 + suffix.size());
  out.append(key);
  out.push_back('#');
  out.append(suffix);
  return out;
}

bool HotKeySpreader::IsHot(std::string_view key) const { return hot_.find(key) != hot_.end(); }

std::vector<std::string> HotKeySpreader::WriteKeys(std::string_view key) const {
  if (!IsHot(key)) return {std::string(key)};
  std::vector<std::string> keys;
  keys.reserve(replicas_);
  for (std::uint32_t i = 0; i < replicas_; ++i) keys.push_back(SubKey(key, i));
  return keys;
}

std::string HotKeySpreader::ReadKey(std::string_view key, RandomSource& random) const {
  if (!IsHot(key)) return std::string(key);
  return SubKey(key, static_cast<std::uint32_t>(random.Uniform(replicas_)));
}

// ---------------------------------------------------------------------------------------------
// HotKeyRouting

HotKeyRouting::HotKeyRouting(HotKeyPolicy policy)
    : policy_(policy), detector_(policy.detector), current_(std::make_shared<const HotSet>()) {}

void HotKeyRouting::Record(std::string_view key) {
  if (enabled()) detector_.Record(key);
}

void HotKeyRouting::Refresh() {
  if (!enabled()) return;
  auto next = std::make_shared<HotSet>();
  const std::uint64_t total = detector_.total();
  if (total >= policy_.min_traffic) {
    for (const HeavyHitter& h : detector_.HotKeys(policy_.fraction)) {
      // Only a key the sketch is sure of: an unlucky cold key that inherited a big error is not
      // spread.
      if (!h.guaranteed) continue;
      HotKey k;
      k.key = h.key;
      k.hash = HashKey(h.key);
      k.share = static_cast<double>(h.count) / static_cast<double>(total);
      next->hashes.insert(k.hash);
      next->keys.push_back(std::move(k));
    }
  }
  any_hot_.store(!next->keys.empty(), std::memory_order_relaxed);
  current_.Store(std::move(next));
}

std::uint32_t HotKeyRouting::Rank(std::uint64_t key_hash, std::uint32_t members,
                                  RandomSource& random) const {
  if (members <= 1 || !any_hot_.load(std::memory_order_relaxed)) return 0;
  const std::shared_ptr<const HotSet> hot = current_.Load();
  if (!hot->hashes.contains(key_hash)) return 0;
  return static_cast<std::uint32_t>(random.Uniform(std::min(policy_.owners, members)));
}

std::vector<HotKey> HotKeyRouting::Hot() const { return current_.Load()->keys; }

Result<std::size_t> PickRanked(const RouterSnapshot& snapshot, std::uint64_t key_hash,
                               std::uint32_t rank) {
  if (!snapshot.maglev && !snapshot.ring) {
    return FailedPreconditionError("PickRanked: the snapshot has no ring or Maglev table");
  }
  // The owners before `rank` are taken out with a load no cap admits; everyone else has room
  // (an unbounded factor), so the walk is the picker's own probe order.
  constexpr std::uint64_t kTaken = std::uint64_t{1} << 62;
  const BoundedLoadOptions unbounded{1e12};
  std::vector<std::uint64_t> loads(snapshot.table->size(), 0);
  auto pick = [&] {
    const LoadView view{loads, 0};
    return snapshot.maglev ? snapshot.maglev->PickBounded(key_hash, view, unbounded)
                           : snapshot.ring->PickBounded(key_hash, view, unbounded);
  };
  Result<std::size_t> owner = pick();
  for (std::uint32_t r = 0; r < rank && owner.ok(); ++r) {
    loads[*owner] = kTaken;
    Result<std::size_t> next = pick();
    if (!next.ok()) break;  // no more members: the last one stands
    owner = next;
  }
  return owner;
}

}  // namespace drover::router
