// The router's random source, injected so that tests and simulations are reproducible: the
// RandomSource interface the pickers draw from (P2C's two choices) and Xoshiro256, the
// implementation used in production. A source owns only its own generator state. Not thread-safe:
// one source per thread.
#pragma once

#include <cstdint>

#include "drover/router/hash.h"

namespace drover::router {

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

}  // namespace drover::router
