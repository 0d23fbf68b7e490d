#include <gtest/gtest.h>

#include "drover/router.h"

namespace drover::router {
namespace {

// Golden values: the same key must map the same way in every process, build and machine. If
// this test fails, every deployed router would disagree with this build about key ownership.
TEST(HashTest, GoldenValues) {
  EXPECT_EQ(HashKey(""), 0x6bccd04ed639efebULL);
  EXPECT_EQ(HashKey("player-42"), 0xb75793e2eabd4250ULL);
  EXPECT_EQ(HashKey("boss#0"), 0x15a17513fbd757e5ULL);
  EXPECT_EQ(HashWithSeed("node-1", 0), 0x0db09edfd9458385ULL);
}

TEST(HashTest, KnownXxh3Vector) {
  // XXH3-64 of the empty input with seed 0, as published by the xxHash project: proves the
  // library linked is the stable XXH3, not another variant.
  EXPECT_EQ(HashWithSeed("", 0), 0x2D06800538D394C2ULL);
}

TEST(HashTest, SeedMatters) {
  EXPECT_NE(HashWithSeed("k", 1), HashWithSeed("k", 2));
  EXPECT_EQ(HashKey("k"), HashWithSeed("k", kHashSeed));
}

TEST(HashTest, ReduceToRangeStaysInRange) {
  EXPECT_EQ(ReduceToRange(0, 10), 0u);
  EXPECT_EQ(ReduceToRange(~std::uint64_t{0}, 10), 9u);
  EXPECT_EQ(ReduceToRange(std::uint64_t{1} << 63, 10), 5u);
}

}  // namespace
}  // namespace drover::router
