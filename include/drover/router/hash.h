// Key hashing for the router: the one key hash every process agrees on, seeded hashes for
// deriving independent hash functions, and the division-free reduction of a hash onto [0, n).
// Free functions over their arguments only: no state, nothing owned, thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

namespace drover::router {

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

}  // namespace drover::router
