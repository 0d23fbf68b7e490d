#include <xxhash.h>

#include "drover/router.h"

namespace drover::router {

std::uint64_t HashKey(std::string_view key) {
  return XXH3_64bits_withSeed(key.data(), key.size(), kHashSeed);
}

std::uint64_t HashWithSeed(std::string_view data, std::uint64_t seed) {
  return XXH3_64bits_withSeed(data.data(), data.size(), seed);
}

namespace {
std::uint64_t SplitMix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
std::uint64_t Rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Xoshiro256::Xoshiro256(std::uint64_t seed) {
  for (auto& word : s_) word = SplitMix64(seed);
}

std::uint64_t Xoshiro256::Next() {
  const std::uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

std::string_view EndpointStateName(EndpointState state) {
  switch (state) {
    case EndpointState::kStarting:
      return "STARTING";
    case EndpointState::kReady:
      return "READY";
    case EndpointState::kDraining:
      return "DRAINING";
  }
  return "UNKNOWN";
}

}  // namespace drover::router
