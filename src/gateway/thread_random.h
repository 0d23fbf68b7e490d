// One random source per io thread, for picks and jitter (the router's generators are not
// thread-safe by design; a thread_local one needs no lock).
#pragma once

#include <random>

#include "drover/router.h"

namespace drover::gateway {

inline router::RandomSource& ThreadRandom() {
  thread_local router::Xoshiro256 random(std::random_device{}());
  return random;
}

}  // namespace drover::gateway
