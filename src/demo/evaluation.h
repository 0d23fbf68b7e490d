// Measures the router's algorithms against each other and against the hash % n baseline, in one
// run on generated data: key movement on membership change, load balance, and pick cost.
// Used by `drover bench router` and the demo's shard step; deterministic apart from the timings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

namespace drover::demo {

struct EvaluationOptions {
  std::size_t endpoints = 100;   // N
  std::size_t keys = 1'000'000;  // distinct keys, and draws for the Zipf stream
  double zipf_s = 1.1;
  double bounded_c = 1.25;
  std::size_t timing_picks = 2'000'000;  // picks per timed run (best of 3 runs is reported)
  std::uint64_t seed = 42;
};

// Keys moved as a multiple of the ideal fraction (1/(N+1) on add, 1/N on remove); 1.0 is ideal.
struct Movement {
  double add = 0;                  // measured over the generated keys
  double remove = 0;               //   "
  double add_exact = -1;           // exact hash-space (or table) share; -1 when not applicable
  double remove_exact = -1;        //   "
  double remove_exact_worst = -1;  // worst exact case over removing each of the N endpoints
};

struct Evaluation {
  std::size_t n = 0;
  std::size_t keys = 0;
  double zipf_s = 0;
  double bounded_c = 0;

  Movement modn, ring, maglev;
  Movement maglev_paper_size;  // Maglev at the paper's table size M >= 100 * N, for comparison

  // Peak-to-mean of per-endpoint load (max share / fair share). Exact where the algorithm has an
  // exact share; "sampled" over the generated keys.
  double ring_100_exact = 0, ring_256_exact = 0, maglev_exact = 0;
  double ring_100_sampled = 0, ring_256_sampled = 0, maglev_sampled = 0;
  double ring_zipf = 0, maglev_zipf = 0;         // no bound: a hot key pins one endpoint
  double bounded_uniform = 0, bounded_zipf = 0;  // ring + bounded load
  double bounded_maglev_zipf = 0;                // Maglev + bounded load
  // Reads of the Zipf stream after hot-key spreading (keys over 0.5% of traffic, 8 sub-keys each).
  double ring_zipf_spread = 0;
  std::size_t hot_keys_spread = 0;

  // Nanoseconds per pick, key hash included (except p2c, which takes no key).
  double pick_ns_modn = 0, pick_ns_ring = 0, pick_ns_maglev = 0, pick_ns_bounded = 0,
         pick_ns_p2c = 0;
  // Milliseconds to build the structure for N endpoints.
  double build_ms_ring = 0, build_ms_maglev = 0;
};

// `progress` (may be empty) receives one short line per stage.
Evaluation EvaluateRouting(const EvaluationOptions& options,
                           const std::function<void(std::string_view)>& progress = {});

}  // namespace drover::demo
