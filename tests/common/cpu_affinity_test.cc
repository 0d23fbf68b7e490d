#include "common/cpu_affinity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

namespace drover {
namespace {

TEST(CpuAffinityTest, SpreadGivesEachWorkerItsOwnCpusAndKeepsThemAll) {
  const std::vector<int> allowed = {0, 1, 2, 3, 5, 8, 9};
  const auto sets = SpreadCpus(allowed, 3);
  ASSERT_EQ(sets.size(), 3u);
  EXPECT_EQ(sets[0], (std::vector<int>{0, 3, 9}));
  EXPECT_EQ(sets[1], (std::vector<int>{1, 5}));
  EXPECT_EQ(sets[2], (std::vector<int>{2, 8}));
  std::vector<int> all;
  for (const auto& s : sets) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, allowed);  // disjoint, and nothing the process may use is left out
}

TEST(CpuAffinityTest, NothingToSpreadLeavesThreadsWhereTheKernelPutsThem) {
  EXPECT_TRUE(SpreadCpus({0, 1, 2, 3}, 1).empty());  // one worker: nothing to keep apart
  EXPECT_TRUE(SpreadCpus({0, 1}, 3).empty());        // more workers than CPUs: some must share
  EXPECT_TRUE(SpreadCpus({}, 2).empty());
  EXPECT_EQ(SpreadCpus({4, 6}, 2), (std::vector<std::vector<int>>{{4}, {6}}));
}

TEST(CpuAffinityTest, APinnedThreadRunsOnlyWhereItWasPut) {
  const std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  std::vector<int> seen;
  Status pinned;
  std::thread t([&] {
    pinned = PinCurrentThread({allowed.back()});
    seen = AllowedCpus();
  });
  t.join();
  ASSERT_TRUE(pinned.ok()) << pinned.message();
  EXPECT_EQ(seen, std::vector<int>{allowed.back()});
  EXPECT_EQ(AllowedCpus(), allowed);  // the pin was the other thread's alone
  EXPECT_FALSE(PinCurrentThread({-1}).ok());
  EXPECT_EQ(CpuList({0, 2, 4}), "0,2,4");
}

}  // namespace
}  // namespace drover
