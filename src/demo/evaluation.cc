#include "demo/evaluation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "drover/hot_keys.h"
#include "drover/router.h"

namespace drover::demo {
namespace {

using router::BoundedLoadOptions;
using router::Endpoint;
using router::EndpointState;
using router::HashKey;
using router::HotKeyDetector;
using router::HotKeySpreader;
using router::LoadView;
using router::Maglev;
using router::MaglevOptions;
using router::ModN;
using router::P2cPicker;
using router::RandomSource;
using router::RingHash;
using router::RingHashOptions;
using router::RoutingTable;
using router::Uint128;
using router::Xoshiro256;

using Table = std::shared_ptr<const RoutingTable>;

std::string EndpointId(std::size_t i) {
  std::string digits = std::to_string(i);
  return "shard-" + std::string(digits.size() < 3 ? 3 - digits.size() : 0, '0') + digits;
}

Table MakeTable(std::size_t n, std::size_t skip = std::numeric_limits<std::size_t>::max()) {
  std::vector<Endpoint> endpoints;
  for (std::size_t i = 0; i < n; ++i) {
    if (i == skip) continue;
    Endpoint e;
    e.id = EndpointId(i);
    e.address = "127.0.0.1:" + std::to_string(20000 + i);
    e.state = EndpointState::kReady;
    endpoints.push_back(std::move(e));
  }
  return RoutingTable::Create(1, std::move(endpoints)).value();
}

// Owner of every key as a global endpoint number (the i of EndpointId(i)), so that owners from
// tables with different members compare directly.
template <typename Picker>
std::vector<std::uint32_t> Owners(const Picker& picker, const RoutingTable& table,
                                  const std::vector<std::uint64_t>& hashes) {
  std::vector<std::uint32_t> global(table.size());
  for (std::size_t i = 0; i < table.size(); ++i) {
    global[i] = static_cast<std::uint32_t>(std::stoul(table.at(i).id.substr(6)));
  }
  std::vector<std::uint32_t> owners(hashes.size());
  for (std::size_t k = 0; k < hashes.size(); ++k)
    owners[k] = global[picker.Pick(hashes[k]).value()];
  return owners;
}

double MovedFraction(const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b) {
  std::size_t moved = 0;
  for (std::size_t k = 0; k < a.size(); ++k) moved += a[k] != b[k];
  return static_cast<double>(moved) / static_cast<double>(a.size());
}

template <typename Picker>
Movement MeasureMovement(const std::function<Picker(const RoutingTable&)>& build, std::size_t n,
                         const std::vector<std::uint64_t>& hashes) {
  const Table base = MakeTable(n);
  const Table grown = MakeTable(n + 1);
  const Table shrunk = MakeTable(n, n - 1);  // the newest endpoint leaves
  const auto before = Owners(build(*base), *base, hashes);
  Movement m;
  m.add = MovedFraction(before, Owners(build(*grown), *grown, hashes)) * static_cast<double>(n + 1);
  m.remove =
      MovedFraction(before, Owners(build(*shrunk), *shrunk, hashes)) * static_cast<double>(n);
  return m;
}

// Maglev movement over the generated keys, plus exact movement as the fraction of lookup-table
// slots whose owner changes (comparable only while the table size stays the same).
Movement MeasureMaglevMovement(const MaglevOptions& options, std::size_t n,
                               const std::vector<std::uint64_t>& hashes, bool all_removals) {
  Movement m = MeasureMovement<Maglev>(
      [&](const RoutingTable& t) { return Maglev::Build(t, options); }, n, hashes);
  const Table base = MakeTable(n);
  const Maglev before = Maglev::Build(*base, options);
  auto slot_change = [&](const Table& other) {
    const Maglev after = Maglev::Build(*other, options);
    if (after.table_size() != before.table_size()) return -1.0;
    std::size_t changed = 0;
    for (std::size_t s = 0; s < before.table_size(); ++s) {
      // The smallest hash that lands in slot s.
      const std::uint64_t h = static_cast<std::uint64_t>(
          ((static_cast<Uint128>(s) << 64) + before.table_size() - 1) / before.table_size());
      changed += base->at(before.Pick(h).value()).id != other->at(after.Pick(h).value()).id;
    }
    return static_cast<double>(changed) / static_cast<double>(before.table_size());
  };
  const double add = slot_change(MakeTable(n + 1));
  const double remove = slot_change(MakeTable(n, n - 1));
  m.add_exact = add < 0 ? -1 : add * static_cast<double>(n + 1);
  m.remove_exact = remove < 0 ? -1 : remove * static_cast<double>(n);
  if (all_removals) {
    double worst = -1;
    // Each removal rebuilds the table; beyond 100 endpoints, 20 evenly spread removals.
    const std::size_t trials = n <= 100 ? n : 20;
    for (std::size_t t = 0; t < trials; ++t) {
      worst = std::max(worst, slot_change(MakeTable(n, t * n / trials)));
    }
    m.remove_exact_worst = worst < 0 ? -1 : worst * static_cast<double>(n);
  }
  return m;
}

// Largest load over the mean load; every entry is a member (all endpoints here are READY).
template <typename T>
double PeakToMean(const std::vector<T>& loads) {
  if (loads.empty()) return 0;
  double sum = 0, peak = 0;
  for (T load : loads) {
    sum += static_cast<double>(load);
    peak = std::max(peak, static_cast<double>(load));
  }
  return sum == 0 ? 0 : peak / (sum / static_cast<double>(loads.size()));
}

template <typename Picker>
double SampledPeakToMean(const Picker& picker, std::size_t n,
                         const std::vector<std::uint64_t>& hashes) {
  std::vector<std::uint64_t> counts(n, 0);
  for (std::uint64_t h : hashes) ++counts[picker.Pick(h).value()];
  return PeakToMean(counts);
}

// Routes every draw with bounded load, each draw adding one unit of load that stays (a session),
// and returns the final peak-to-mean.
template <typename Picker>
double BoundedPeakToMean(const Picker& picker, std::size_t n,
                         const std::vector<std::uint64_t>& draws, double c) {
  std::vector<std::uint64_t> loads(n, 0);
  std::uint64_t total = 0;
  for (std::uint64_t h : draws) {
    const std::size_t i = picker.PickBounded(h, LoadView{loads, total}, {c}).value();
    ++loads[i];
    ++total;
  }
  return PeakToMean(loads);
}

// Zipf(s) over ranks 1..universe by inverse CDF; returns the 0-based rank of each draw.
std::vector<std::uint32_t> ZipfRanks(std::size_t universe, std::size_t draws, double s,
                                     RandomSource& random) {
  std::vector<double> cdf(universe);
  double sum = 0;
  for (std::size_t r = 0; r < universe; ++r) {
    sum += 1.0 / std::pow(static_cast<double>(r + 1), s);
    cdf[r] = sum;
  }
  std::vector<std::uint32_t> out(draws);
  for (auto& rank : out) {
    const double u = random.UniformDouble() * sum;
    const auto r = std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
    rank = static_cast<std::uint32_t>(std::min<std::size_t>(r, universe - 1));
  }
  return out;
}

// Hot-key spreading end to end: a detector watches the stream, every key above 0.5% of it is
// spread over 8 sub-keys, and reads of the stream are routed through the spreader.
double SpreadPeakToMean(const RingHash& ring, std::size_t n, const std::vector<std::string>& keys,
                        const std::vector<std::uint32_t>& ranks, RandomSource& random,
                        std::size_t* hot_keys) {
  HotKeyDetector detector;
  for (std::uint32_t r : ranks) detector.Record(keys[r]);
  const HotKeySpreader spreader = HotKeySpreader::FromHeavyHitters(detector.HotKeys(0.005), 8);
  *hot_keys = spreader.size();
  std::vector<std::uint64_t> counts(n, 0);
  for (std::uint32_t r : ranks) ++counts[*ring.Pick(HashKey(spreader.ReadKey(keys[r], random)))];
  return PeakToMean(counts);
}

// Best of three timed runs of `body(i)` over `count` iterations, in ns per iteration.
template <typename Body>
double TimeNs(std::size_t count, Body body) {
  double best = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 3; ++run) {
    std::uint64_t sink = 0;
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < count; ++i) sink += body(i);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    // Keeps the loop's results observable so the compiler cannot drop it.
    asm volatile("" : : "r"(sink) : "memory");
    best = std::min(best, std::chrono::duration<double, std::nano>(elapsed).count() /
                              static_cast<double>(count));
  }
  return best;
}

template <typename Fn>
double TimeMs(Fn fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Ring movement over the generated keys, plus exact movement as hash-space shares: on the ring
// only the arcs the newcomer claims change owner, and only the leaver's arcs move.
Movement MeasureRingMovement(std::size_t n, const std::vector<std::uint64_t>& hashes) {
  Movement m = MeasureMovement<RingHash>([](const RoutingTable& t) { return RingHash::Build(t); },
                                         n, hashes);
  const Table base = MakeTable(n);
  const Table grown = MakeTable(n + 1);
  const auto shares = RingHash::Build(*base).Shares();
  m.add_exact =
      RingHash::Build(*grown).Shares()[*grown->IndexOf(EndpointId(n))] * static_cast<double>(n + 1);
  m.remove_exact = shares[*base->IndexOf(EndpointId(n - 1))] * static_cast<double>(n);
  m.remove_exact_worst = *std::max_element(shares.begin(), shares.end()) * n;
  return m;
}

RingHashOptions Vnodes(std::uint32_t per_weight) {
  RingHashOptions options;
  options.vnodes_per_weight = per_weight;
  return options;
}

// The pickers the balance and cost measurements share, built once over N READY endpoints.
struct Pickers {
  explicit Pickers(std::size_t n)
      : table(MakeTable(n)),
        ring_100(RingHash::Build(*table, Vnodes(100))),
        ring(RingHash::Build(*table)),
        maglev(Maglev::Build(*table)),
        modn(ModN::Build(*table)) {}

  const Table table;
  const RingHash ring_100;
  const RingHash ring;  // 256 vnodes
  const Maglev maglev;
  const ModN modn;
};

// Peak-to-mean of exact shares and over the generated keys.
void MeasureBalance(const Pickers& p, std::size_t n, const std::vector<std::uint64_t>& hashes,
                    Evaluation& ev) {
  ev.ring_100_exact = PeakToMean(p.ring_100.Shares());
  ev.ring_256_exact = PeakToMean(p.ring.Shares());
  ev.maglev_exact = PeakToMean(p.maglev.Shares());
  ev.ring_100_sampled = SampledPeakToMean(p.ring_100, n, hashes);
  ev.ring_256_sampled = SampledPeakToMean(p.ring, n, hashes);
  ev.maglev_sampled = SampledPeakToMean(p.maglev, n, hashes);
}

// Peak-to-mean under the Zipf stream (the keys of `ranks`), unbounded and with bounded load.
void MeasureSkewedBalance(const Pickers& p, std::size_t n, const std::vector<std::uint64_t>& hashes,
                          const std::vector<std::uint32_t>& ranks, double bounded_c,
                          Evaluation& ev) {
  std::vector<std::uint64_t> zipf(ranks.size());
  for (std::size_t i = 0; i < ranks.size(); ++i) zipf[i] = hashes[ranks[i]];
  ev.ring_zipf = SampledPeakToMean(p.ring, n, zipf);
  ev.maglev_zipf = SampledPeakToMean(p.maglev, n, zipf);
  ev.bounded_uniform = BoundedPeakToMean(p.ring, n, hashes, bounded_c);
  ev.bounded_zipf = BoundedPeakToMean(p.ring, n, zipf, bounded_c);
  ev.bounded_maglev_zipf = BoundedPeakToMean(p.maglev, n, zipf, bounded_c);
}

// Nanoseconds per pick of each picker, cycling through the keys.
void MeasurePickCost(const Pickers& p, std::size_t n, const std::vector<std::string>& keys,
                     const std::vector<std::uint64_t>& hashes, const EvaluationOptions& options,
                     Xoshiro256& random, Evaluation& ev) {
  const std::size_t k = keys.size();
  const std::size_t picks = std::max<std::size_t>(options.timing_picks, 1000);
  auto key_at = [&](std::size_t i) -> const std::string& { return keys[i % k]; };
  ev.pick_ns_modn = TimeNs(picks, [&](std::size_t i) { return *p.modn.Pick(HashKey(key_at(i))); });
  ev.pick_ns_ring = TimeNs(picks, [&](std::size_t i) { return *p.ring.Pick(HashKey(key_at(i))); });
  ev.pick_ns_maglev =
      TimeNs(picks, [&](std::size_t i) { return *p.maglev.Pick(HashKey(key_at(i))); });
  // Loads as after routing every key once: realistic caps, most owners under them.
  std::vector<std::uint64_t> loads(n, 0);
  for (std::uint64_t h : hashes) ++loads[*p.ring.Pick(h)];
  const LoadView view{loads, k};
  const BoundedLoadOptions bounded{options.bounded_c};
  ev.pick_ns_bounded = TimeNs(
      picks, [&](std::size_t i) { return *p.ring.PickBounded(HashKey(key_at(i)), view, bounded); });
  const P2cPicker p2c = P2cPicker::Build(*p.table);
  const MonoTime now = MonoClock::now();
  ev.pick_ns_p2c = TimeNs(picks, [&](std::size_t) { return *p2c.Pick(loads, now, random); });
}

}  // namespace

Evaluation EvaluateRouting(const EvaluationOptions& options,
                           const std::function<void(std::string_view)>& progress) {
  auto say = [&](std::string_view line) {
    if (progress) progress(line);
  };
  const std::size_t n = std::max<std::size_t>(options.endpoints, 2);
  const std::size_t k = std::max<std::size_t>(options.keys, 1000);
  Evaluation ev;
  ev.n = n;
  ev.keys = k;
  ev.zipf_s = options.zipf_s;
  ev.bounded_c = options.bounded_c;

  std::vector<std::string> keys(k);
  std::vector<std::uint64_t> hashes(k);
  for (std::size_t i = 0; i < k; ++i) {
    keys[i] = "key-" + std::to_string(i);
    hashes[i] = HashKey(keys[i]);
  }

  say("movement: hash % n");
  ev.modn = MeasureMovement<ModN>([](const RoutingTable& t) { return ModN::Build(t); }, n, hashes);

  say("movement: ring hash (256 vnodes)");
  ev.ring = MeasureRingMovement(n, hashes);

  say("movement: maglev");
  ev.maglev = MeasureMaglevMovement(MaglevOptions{}, n, hashes, /*all_removals=*/true);
  MaglevOptions paper_size;
  paper_size.entries_per_member = 100;
  ev.maglev_paper_size = MeasureMaglevMovement(paper_size, n, hashes, /*all_removals=*/false);

  say("balance: ring (100 and 256 vnodes), maglev");
  const Pickers pickers(n);
  MeasureBalance(pickers, n, hashes, ev);

  say("balance: bounded load under uniform and zipf keys");
  Xoshiro256 random(options.seed);
  const std::vector<std::uint32_t> ranks = ZipfRanks(k, k, options.zipf_s, random);
  MeasureSkewedBalance(pickers, n, hashes, ranks, options.bounded_c, ev);

  say("hot keys: detection and spreading");
  ev.ring_zipf_spread = SpreadPeakToMean(pickers.ring, n, keys, ranks, random, &ev.hot_keys_spread);

  say("pick cost");
  MeasurePickCost(pickers, n, keys, hashes, options, random, ev);

  say("build cost");
  ev.build_ms_ring = TimeMs([&] { (void)RingHash::Build(*pickers.table); });
  ev.build_ms_maglev = TimeMs([&] { (void)Maglev::Build(*pickers.table); });
  return ev;
}

}  // namespace drover::demo
