// Drover router: how a client or gateway chooses an endpoint.
//
// Data flow: a single writer (the discovery client or the gateway's control thread) turns the
// current endpoint list into an immutable RouterSnapshot -- the versioned RoutingTable plus the
// pickers built from it (ring, Maglev, P2C) -- and publishes it through Published<T>. Any number
// of data-path threads Load() the snapshot once per request and pick on it; a load never waits for
// a build, only (at worst) for one pointer swap. A reader keeps its snapshot alive for as long as
// it needs it, even while newer ones are published. Picks return an index into the snapshot's
// endpoint vector.
//
// Key-affine routing (RT-4): RingHash and Maglev map a key's 64-bit hash to an owner; their
// PickBounded() overlays bounded load (factor c) by walking the algorithm's own successor
// sequence to the first endpoint under its cap. New-connection routing (RT-3): P2cPicker, power
// of two choices least-connections with slow start. ModN (hash % n) exists only as the baseline
// benchmarks compare against. Hot-key detection and spreading (RT-5) live in drover/hot_keys.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "drover/clock.h"
#include "drover/status.h"

namespace drover::router {

// ---------------------------------------------------------------------------------------------
// Hashing

// The fixed seed of every key hash. Changing it remaps every key in every deployed process.
inline constexpr std::uint64_t kHashSeed = 0x6472'6f76'6572'0001ULL;

// XXH3-64 of `key` with kHashSeed: identical in every process, build and machine.
std::uint64_t HashKey(std::string_view key);

// XXH3-64 of `data` with an explicit seed (for deriving independent hash functions).
std::uint64_t HashWithSeed(std::string_view data, std::uint64_t seed);

// GCC/Clang 128-bit integer; __extension__ keeps -Wpedantic quiet about it.
__extension__ typedef unsigned __int128 Uint128;

// Maps a 64-bit value uniformly onto [0, n) without division (Lemire's multiply-shift).
inline std::uint64_t ReduceToRange(std::uint64_t x, std::uint64_t n) {
  return static_cast<std::uint64_t>((static_cast<Uint128>(x) * n) >> 64);
}

// ---------------------------------------------------------------------------------------------
// Random source (injected, so tests and simulations are reproducible)

class RandomSource {
 public:
  virtual ~RandomSource() = default;
  virtual std::uint64_t Next() = 0;
  // Uniform in [0, n); n > 0.
  std::uint64_t Uniform(std::uint64_t n) { return ReduceToRange(Next(), n); }
  // Uniform in [0, 1).
  double UniformDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
};

// xoshiro256** seeded through splitmix64. Not thread-safe: one per thread.
class Xoshiro256 final : public RandomSource {
 public:
  explicit Xoshiro256(std::uint64_t seed);
  std::uint64_t Next() override;

 private:
  std::uint64_t s_[4];
};

// ---------------------------------------------------------------------------------------------
// Endpoints and the routing table

enum class EndpointState : std::uint8_t { kStarting, kReady, kDraining };
std::string_view EndpointStateName(EndpointState state);

struct Endpoint {
  std::string id;            // unique within a table; the identity that hashing uses
  std::string address;       // "host:port"
  std::uint32_t weight = 1;  // relative capacity; 0 takes no traffic
  std::string zone;
  EndpointState state = EndpointState::kStarting;
  bool accepting = true;  // "zone full" and similar: READY but wants no new work
  // When it last became READY; unset means READY since before this process learned of it, and
  // then no slow start applies.
  std::optional<MonoTime> ready_since;
  std::uint64_t generation = 0;
  // "host:port" of the instance's HTTP /ready probe, when it publishes one (label
  // drover.health); gateways check it actively.
  std::string health;

  // May own keys (member of the ring / Maglev table).
  bool KeyEligible() const { return state == EndpointState::kReady && weight > 0; }
  // May receive new connections and new keys right now.
  bool Routable() const { return KeyEligible() && accepting; }

  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

// An immutable, versioned set of endpoints, sorted by id so that equal sets give equal tables.
// Thread-safe to read from any number of threads.
class RoutingTable {
 public:
  // Fails with INVALID_ARGUMENT on an empty or duplicate id. An empty endpoint list is valid
  // (a table can be empty); picking on it fails cleanly.
  static Result<std::shared_ptr<const RoutingTable>> Create(std::uint64_t version,
                                                            std::vector<Endpoint> endpoints);

  std::uint64_t version() const { return version_; }
  const std::vector<Endpoint>& endpoints() const { return endpoints_; }
  std::size_t size() const { return endpoints_.size(); }
  const Endpoint& at(std::size_t index) const { return endpoints_.at(index); }
  std::optional<std::size_t> IndexOf(std::string_view id) const;

 private:
  RoutingTable(std::uint64_t version, std::vector<Endpoint> endpoints)
      : version_(version), endpoints_(std::move(endpoints)) {}

  std::uint64_t version_;
  std::vector<Endpoint> endpoints_;
};

// One writer publishes immutable values; many readers load them. Thread-safe.
//
// The shared_ptr lives behind a one-bit spin lock held only for a pointer copy (Load) or a pointer
// swap (Store) -- never while a value is built or destroyed -- so a reader waits at most for one
// pointer swap, never for a writer's work. This is the design of libstdc++'s
// std::atomic<std::shared_ptr>, whose GCC 12 load() releases its lock with relaxed ordering (a data
// race under the C++ memory model, reported by ThreadSanitizer); here both sides release.
template <typename T>
class Published {
 public:
  Published() = default;
  explicit Published(std::shared_ptr<const T> initial) : value_(std::move(initial)) {}
  Published(const Published&) = delete;
  Published& operator=(const Published&) = delete;

  std::shared_ptr<const T> Load() const {
    Lock();
    std::shared_ptr<const T> copy = value_;
    Unlock();
    return copy;
  }

  void Store(std::shared_ptr<const T> value) {
    Lock();
    value_.swap(value);
    version_.fetch_add(1, std::memory_order_release);
    Unlock();
    // `value` now holds the previous snapshot; if this was its last reference it is destroyed
    // here, outside the lock.
  }

  // A per-thread view for hot loops: Current() reloads only when a new value was published, so
  // in the steady state a read is one atomic load of a counter that only the writer writes -- no
  // lock, no reference-count traffic. A Reader keeps its last value alive until its next
  // Current() call, and frees it there if it held the last reference. Not thread-safe: one
  // Reader per thread. Must not outlive its Published.
  class Reader {
   public:
    explicit Reader(const Published& source) : source_(&source) {}

    const std::shared_ptr<const T>& Current() {
      const std::uint64_t version = source_->version_.load(std::memory_order_acquire);
      if (version != version_ || value_ == nullptr) {
        // A Store between the two loads only makes the next call reload once more.
        value_ = source_->Load();
        version_ = version;
      }
      return value_;
    }

   private:
    const Published* source_;
    std::uint64_t version_ = 0;
    std::shared_ptr<const T> value_;
  };

 private:
  void Lock() const {
    while (locked_.test_and_set(std::memory_order_acquire)) {
      while (locked_.test(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void Unlock() const { locked_.clear(std::memory_order_release); }

  mutable std::atomic_flag locked_;  // guards value_
  std::shared_ptr<const T> value_;
  std::atomic<std::uint64_t> version_{0};  // bumped by every Store
};

// ---------------------------------------------------------------------------------------------
// Loads and bounded load

// Current load per table endpoint (loads[i] belongs to table endpoint i of the snapshot being
// picked on -- positions shift between table versions, so counters must be re-indexed when a new
// snapshot is taken) and their sum over the picker's members. Plain values: the caller snapshots
// its counters before picking. Fewer loads than endpoints is INVALID_ARGUMENT.
struct LoadView {
  std::span<const std::uint64_t> loads;
  std::uint64_t total = 0;
};

struct BoundedLoadOptions {
  double c = 1.25;  // finite, >= 1: an endpoint takes at most ceil(c * (total + 1) * w / W)
};

// The cap of one member: ceil(c * (total + 1) * weight / total_weight), saturating near 2^63.
std::uint64_t BoundedLoadCap(double c, std::uint64_t total_load, std::uint32_t weight,
                             std::uint64_t total_weight);

// ---------------------------------------------------------------------------------------------
// Key-affine pickers

namespace internal {
// Which table endpoints a key-affine picker has as members: per table index, the weight (0 for
// non-members) and whether it accepts new work; plus totals over the members.
struct MemberView {
  std::vector<std::uint32_t> weight;
  std::vector<std::uint8_t> accepting;
  std::size_t count = 0;
  std::size_t accepting_count = 0;
  std::uint64_t total_weight = 0;

  static MemberView FromTable(const RoutingTable& table);
};
}  // namespace internal

struct RingHashOptions {
  std::uint32_t vnodes_per_weight = 256;  // ring points per unit of weight
  std::uint32_t max_points = 1u << 22;    // weights are scaled down beyond this
};

// Consistent-hash ring with virtual nodes over a table's KeyEligible() endpoints. Immutable after
// Build(); thread-safe to read.
class RingHash {
 public:
  static RingHash Build(const RoutingTable& table, const RingHashOptions& options = {});

  // The first accepting owner clockwise from `key_hash`. UNAVAILABLE when there is none.
  Result<std::size_t> Pick(std::uint64_t key_hash) const;
  // Bounded load: the first accepting owner clockwise whose load is under its cap.
  Result<std::size_t> PickBounded(std::uint64_t key_hash, const LoadView& loads,
                                  const BoundedLoadOptions& options = {}) const;

  // Exact fraction of the 64-bit hash space each table endpoint owns (0 for non-members).
  std::vector<double> Shares() const;
  std::size_t points() const { return hashes_.size(); }
  // Point i in ring order (i < points()): its hash and the table index owning it.
  std::uint64_t point_hash(std::size_t i) const { return hashes_[i]; }
  std::uint32_t point_owner(std::size_t i) const { return owners_[i]; }
  std::size_t members() const { return members_.count; }
  std::uint64_t total_weight() const { return members_.total_weight; }

 private:
  std::size_t FirstPointAtOrAfter(std::uint64_t key_hash) const;
  // Pick (loads == nullptr) and PickBounded share one walk clockwise from the key.
  Result<std::size_t> Walk(std::uint64_t key_hash, const LoadView* loads, double c) const;

  std::vector<std::uint64_t> hashes_;        // sorted point hashes
  std::vector<std::uint32_t> owners_;        // table index owning hashes_[i]
  std::vector<std::uint32_t> bucket_start_;  // first point whose top `bucket_bits_` bits >= b
  int bucket_bits_ = 0;
  internal::MemberView members_;
};

struct MaglevOptions {
  // Fixed table size (rounded up to a prime, at most max_table_size). Set it per service to pin
  // M for good.
  std::uint64_t table_size = 0;
  // With table_size 0, M is the first prime above 65536 * 2^k for the smallest k with
  // M >= max(min_table_size, entries_per_member * members), at most max_table_size. M must not
  // follow every membership change -- a new M remaps nearly every key -- so it moves along this
  // ladder, only when the member count crosses a doubling.
  std::uint64_t min_table_size = 65537;
  // The Maglev paper's M >= 100 * N bounds imbalance to 1%, but measured key movement on adding
  // or removing one of 100 members is then ~1.6x the ideal 1/N; >= 2500 * N brings it to
  // ~1.25x or less (docs/ARCHITECTURE.md, "Maglev table size"; `drover bench router` shows both).
  std::uint64_t entries_per_member = 2500;
  std::uint64_t max_table_size = std::uint64_t{1} << 22;  // 4194319 entries, 16 MiB; <= 2^30
};

// The table size Maglev::Build uses for `members` members under `options`.
std::uint64_t MaglevTableSize(std::size_t members, const MaglevOptions& options);

// Maglev lookup table (Eisenbud et al., NSDI 2016), weighted, over a table's KeyEligible()
// endpoints. Built once per table off the hot path; a pick is one hash and one array read.
// Immutable after Build(); thread-safe to read.
class Maglev {
 public:
  static Maglev Build(const RoutingTable& table, const MaglevOptions& options = {});

  Result<std::size_t> Pick(std::uint64_t key_hash) const;
  // Bounded load: walks the lookup table from the key's slot to the first accepting owner under
  // its cap.
  Result<std::size_t> PickBounded(std::uint64_t key_hash, const LoadView& loads,
                                  const BoundedLoadOptions& options = {}) const;

  // Exact fraction of the lookup table each table endpoint owns.
  std::vector<double> Shares() const;
  std::size_t table_size() const { return lookup_.size(); }
  std::size_t members() const { return members_.count; }
  std::uint64_t total_weight() const { return members_.total_weight; }

 private:
  // Pick (loads == nullptr) and PickBounded share one walk over the slots from the key's slot.
  Result<std::size_t> Walk(std::uint64_t key_hash, const LoadView* loads, double c) const;

  std::vector<std::uint32_t> lookup_;  // slot -> table index
  internal::MemberView members_;
};

// hash % n over KeyEligible() endpoints: the baseline that shows why the others exist.
class ModN {
 public:
  static ModN Build(const RoutingTable& table);
  Result<std::size_t> Pick(std::uint64_t key_hash) const;

 private:
  std::vector<std::uint32_t> members_;  // table indices
};

// Smallest prime >= n (n >= 2).
std::uint64_t NextPrime(std::uint64_t n);

// ---------------------------------------------------------------------------------------------
// Load-aware picking for new connections

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

// ---------------------------------------------------------------------------------------------
// Snapshot and router

struct RouterOptions {
  RingHashOptions ring;
  MaglevOptions maglev;
  SlowStartOptions slow_start;
  bool build_ring = true;
  bool build_maglev = true;
};

// Everything a data-path thread needs to route, built together and published as one value.
struct RouterSnapshot {
  std::shared_ptr<const RoutingTable> table;
  std::optional<RingHash> ring;
  std::optional<Maglev> maglev;
  P2cPicker p2c;

  std::uint64_t version() const { return table->version(); }
};

// Builds and publishes RouterSnapshots. Update() may be called from any thread (updates are
// serialised); Snapshot() is safe from any number of threads concurrently with Update() and
// never waits for a build.
class Router {
 public:
  explicit Router(RouterOptions options = {});

  // Publishes a table of `endpoints` with the next version. On error nothing is published.
  Result<std::uint64_t> Update(std::vector<Endpoint> endpoints);
  // Publishes a table built elsewhere (a discovery snapshot), keeping its version -- the
  // registry revision. FAILED_PRECONDITION, publishing nothing, unless it is newer than the last.
  Status Publish(std::shared_ptr<const RoutingTable> table);

  // The current snapshot; never null (version 0 is the initial empty table).
  std::shared_ptr<const RouterSnapshot> Snapshot() const { return current_.Load(); }

  // A per-thread reader of the current snapshot for data-path loops (see Published::Reader).
  using SnapshotReader = Published<RouterSnapshot>::Reader;
  SnapshotReader NewReader() const { return SnapshotReader(current_); }

  const RouterOptions& options() const { return options_; }

 private:
  RouterOptions options_;
  std::mutex update_mu_;            // serialises Update(): versions publish in order
  std::uint64_t last_version_ = 0;  // guarded by update_mu_
  Published<RouterSnapshot> current_;
};

}  // namespace drover::router
