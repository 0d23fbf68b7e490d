// Hot keys (RT-5): detecting the few keys that carry a disproportionate share of traffic, and
// spreading them over several owners. This is a policy layered on top of ordinary key-affine
// routing (RingHash / Maglev in drover/router.h): cold keys keep their single owner, and a hot
// key is rewritten into sub-keys before it is hashed, so the ordinary sharding never changes.
//
//   SpaceSaving     the heavy-hitters sketch (bounded memory, deterministic error bounds).
//   HotKeyDetector  a thread-safe sketch with optional exponential decay, fed with routed keys.
//   HotKeySpreader  an immutable hot set: writes go to every "key#i", reads to one random "key#i".
//   HotKeyRouting   detection and spreading in a live routing path (a gateway listener, an SDK
//                   client): a hot key's connections go to its first `owners` owners in the
//                   ring/Maglev order, chosen uniformly per connection; cold keys keep one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "drover/mutex.h"
#include "drover/router.h"
#include "drover/router/published.h"

namespace drover::router {

// Hashes std::string and std::string_view alike, so that maps keyed by std::string can be probed
// with a string_view without building a temporary string (C++20 heterogeneous lookup).
struct TransparentStringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

// One monitored key of a SpaceSaving sketch. `count` is an upper bound of the key's true
// frequency and `count - error` a lower bound.
struct HeavyHitter {
  std::string key;
  std::uint64_t count = 0;
  std::uint64_t error = 0;
  // Above(): the true frequency certainly exceeds the threshold. Top(n): the key is certainly
  // among the n most frequent (Metwally's test: its lower bound is at least the upper bound of
  // every key ranked below it).
  bool guaranteed = false;

  friend bool operator==(const HeavyHitter&, const HeavyHitter&) = default;
};

// Space-Saving (Metwally, Agrawal, El Abbadi, ICDT 2005): the approximate frequencies of a weighted
// stream of keys in `capacity` counters. For every monitored key, count >= true frequency >=
// count - error, and error <= total / capacity; any key whose true frequency exceeds
// total / capacity is monitored. Add() is O(log capacity): a hash map finds a key's counter and an
// indexed binary min-heap finds the counter to evict.
//
// Owns copies of the monitored keys. Not thread-safe: callers serialise all access (see
// HotKeyDetector); const members may run concurrently with each other.
class SpaceSaving {
 public:
  using HeavyHitter = router::HeavyHitter;

  // Capacity is clamped to [1, 2^32 - 1]. Memory for `capacity` counters is reserved up front.
  explicit SpaceSaving(std::size_t capacity);

  // Counts `weight` occurrences of `key`. Allocation-free when the key is already monitored.
  // A weight of 0 is ignored.
  void Add(std::string_view key, std::uint64_t weight = 1);

  // Exponential decay: halves every count and the total, so that traffic seen before the call
  // weighs half as much as traffic seen after it. Counts round up and lower bounds round down, so
  // both bounds keep holding against the halved true frequencies, and no key above
  // total / capacity is missed; the total stays the sum of the counts (at most capacity / 2 above
  // the halved true total), and an error may exceed total / capacity by the rounding. O(capacity).
  void Halve();

  // Forgets everything.
  void Clear();

  // Sum of all weights added (after Halve(): the sum of the counts).
  std::uint64_t total() const { return total_; }
  std::size_t capacity() const { return capacity_; }
  // Number of monitored keys (<= capacity).
  std::size_t size() const { return slots_.size(); }

  // The n monitored keys with the largest counts, by count descending, ties by key ascending.
  std::vector<HeavyHitter> Top(std::size_t n) const;

  // Every monitored key with count > fraction * total, ordered as Top(). No key whose true
  // frequency exceeds max(fraction, 1 / capacity) * total is missed; entries whose lower bound
  // also exceeds fraction * total are marked guaranteed. `fraction` is meant to be in [0, 1).
  std::vector<HeavyHitter> Above(double fraction) const;

 private:
  struct Slot {
    std::string key;
    std::uint64_t count = 0;
    std::uint64_t error = 0;
    std::uint32_t heap_pos = 0;  // index of this slot in heap_
  };

  bool Less(std::uint32_t a, std::uint32_t b) const { return slots_[a].count < slots_[b].count; }
  void SiftUp(std::uint32_t pos);
  void SiftDown(std::uint32_t pos);
  void Place(std::uint32_t pos, std::uint32_t slot);
  std::vector<HeavyHitter> Sorted(std::vector<HeavyHitter> entries) const;

  std::size_t capacity_;
  std::uint64_t total_ = 0;
  std::vector<Slot> slots_;          // at most capacity_; only Clear() removes slots
  std::vector<std::uint32_t> heap_;  // slot indices, binary min-heap on Slot::count
  std::unordered_map<std::string, std::uint32_t, TransparentStringHash, std::equal_to<>>
      index_;  // monitored key -> slot index
};

struct HotKeyDetectorOptions {
  // Counters in the sketch. Keys carrying more than 1 / capacity of the traffic are never missed;
  // memory is about capacity * (2 * key size + 150 bytes).
  std::size_t capacity = 1024;
  // Exponential decay: every `halve_every` recorded weight units the sketch is halved, so a key
  // that stops being hot fades out with a half-life of `halve_every` records. 0 disables decay;
  // the sketch then covers everything since construction or the last Reset().
  std::uint64_t halve_every = 0;
};

// Feeds routed keys into a SpaceSaving sketch and answers "which keys carry more than X% of the
// traffic". Thread-safe: every member takes one mutex, so Record() from many data-path threads
// contends on it; at high request rates record a sample of the keys (the fractions are unchanged)
// or keep one detector per thread and merge their HotKeys() results.
class HotKeyDetector {
 public:
  explicit HotKeyDetector(HotKeyDetectorOptions options = {});

  void Record(std::string_view key, std::uint64_t weight = 1);

  // SpaceSaving::Above(fraction) of the current window.
  std::vector<HeavyHitter> HotKeys(double fraction) const;

  // Starts a new window: forgets all counts.
  void Reset();

  // Weight in the current window (decayed, if decay is on).
  std::uint64_t total() const;

  const HotKeyDetectorOptions& options() const { return options_; }

 private:
  const HotKeyDetectorOptions options_;
  mutable Mutex mu_;
  SpaceSaving sketch_ DROVER_GUARDED_BY(mu_);
  // Weight recorded since the last Halve().
  std::uint64_t since_halving_ DROVER_GUARDED_BY(mu_) = 0;
};

// The spreading policy: a fixed set of hot keys, each spread over `replicas` sub-keys
// "key#0" .. "key#{replicas-1}" that the ordinary key-affine picker hashes to (most likely)
// different owners. Writes of a hot key go to all of its sub-keys, reads to one chosen uniformly,
// so read load on a hot key divides by `replicas`; cold keys are left untouched.
//
// Sub-keys share the key namespace: an ordinary key that itself looks like "hot#1" lands on the
// same owner as that replica. With replicas == 1 nothing is spread and no key is hot.
//
// Immutable after construction; thread-safe to read (publish a new spreader through
// Published<HotKeySpreader> when the hot set changes).
class HotKeySpreader {
 public:
  // Spreads nothing.
  HotKeySpreader() = default;
  // replicas == 0 is treated as 1.
  HotKeySpreader(std::vector<std::string> hot_keys, std::uint32_t replicas);

  // The keys of `hitters` (e.g. HotKeyDetector::HotKeys()), each spread over `replicas`.
  static HotKeySpreader FromHeavyHitters(const std::vector<HeavyHitter>& hitters,
                                         std::uint32_t replicas);

  // "key#index": the name of one replica of a hot key.
  static std::string SubKey(std::string_view key, std::uint32_t index);

  // The key is spread (always false when replicas() == 1).
  bool IsHot(std::string_view key) const;

  // Hot: every sub-key "key#0" .. "key#{r-1}". Cold: {key}.
  std::vector<std::string> WriteKeys(std::string_view key) const;

  // Hot: one sub-key chosen uniformly with `random`. Cold: key unchanged.
  std::string ReadKey(std::string_view key, RandomSource& random) const;

  std::uint32_t replicas() const { return replicas_; }
  // Number of hot keys.
  std::size_t size() const { return hot_.size(); }

 private:
  std::unordered_set<std::string, TransparentStringHash, std::equal_to<>> hot_;
  std::uint32_t replicas_ = 1;
};

struct HotKeyPolicy {
  // A key carrying more than this share of the recent traffic is hot; 0: no spreading. With few
  // distinct keys every key carries a large share: set it well above 1 / (keys that matter).
  double fraction = 0;
  // A hot key's traffic is spread over this many owners: its own and the next ones in the
  // ring/Maglev probe order (the owners its traffic would fail over to anyway).
  std::uint32_t owners = 3;
  // No key is hot before the window holds this much traffic: a handful of connections decides
  // nothing.
  std::uint64_t min_traffic = 1000;
  // The sketch; by default decayed with a half-life of 10,000 recorded keys, so a key that cools
  // stops being spread.
  HotKeyDetectorOptions detector{1024, 10'000};
};

struct HotKey {
  std::string key;
  std::uint64_t hash = 0;  // HashKey(key)
  double share = 0;        // of the window's traffic (an upper bound)
};

// Hot-key spreading in a live path: Record() each routed key, Refresh() now and then (a control
// thread, every second or so), and ask Rank() which of the key's owners to use.
//
// Thread-safety: all members from any thread. Record() takes the detector's mutex; Rank() is a
// relaxed load while nothing is hot, else a snapshot load (no mutex).
class HotKeyRouting {
 public:
  explicit HotKeyRouting(HotKeyPolicy policy = {});

  bool enabled() const { return policy_.fraction > 0 && policy_.owners > 1; }
  const HotKeyPolicy& policy() const { return policy_; }

  void Record(std::string_view key);
  // Recomputes the hot set from the window and publishes it.
  void Refresh();

  // 0 (the key's own owner) for a cold key; for a hot one, uniform in [0, min(owners, members)),
  // `members` being how many owners the picker has: the caller takes the owner at that rank in
  // the picker's probe order (PickRanked).
  std::uint32_t Rank(std::uint64_t key_hash, std::uint32_t members, RandomSource& random) const;

  // The current hot set, hottest first.
  std::vector<HotKey> Hot() const;

 private:
  struct HotSet {
    std::vector<HotKey> keys;
    std::unordered_set<std::uint64_t> hashes;
  };
  const HotKeyPolicy policy_;
  HotKeyDetector detector_;
  std::atomic<bool> any_hot_{false};
  Published<HotSet> current_;
};

// The owner of `key_hash` at `rank` in the snapshot's key-affine probe order (Maglev when built,
// else the ring): rank 0 is Pick(), rank 1 the owner its traffic would go to without that one,
// and so on. Fewer members than rank + 1: the last one in that order.
Result<std::size_t> PickRanked(const RouterSnapshot& snapshot, std::uint64_t key_hash,
                               std::uint32_t rank);

}  // namespace drover::router
