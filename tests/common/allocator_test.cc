// AllocatorName and ReleaseFreeMemory, in a program on glibc's malloc (common_test) and in one
// linked with mimalloc as the drover binary is (allocator_mimalloc_test): each names the
// allocator it runs on and gives freed memory back.
#include "common/allocator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "common/procfs.h"
#include "testing/eventually.h"
#include "testing/sanitizers.h"

namespace drover {
namespace {

std::uint64_t RssKb() { return procfs::StatusField(::getpid(), "VmRSS").value_or(0); }

TEST(AllocatorTest, NamesTheAllocatorTheProgramRunsOn) {
  const std::string name = AllocatorName();
  EXPECT_EQ(name.rfind(DROVER_TEST_ALLOCATOR, 0), 0u) << name;
}

TEST(AllocatorTest, MemoryFreedInSmallBlocksGoesBackToTheSystem) {
  if (testing::kSanitizerAllocator)
    GTEST_SKIP() << "a sanitizer's allocator holds freed memory in quarantine";
  // 64 MB in blocks of 256 bytes -- far below the size any allocator maps on its own -- written,
  // so resident, then all freed: what a List of every instance leaves behind.
  constexpr std::size_t kBlock = 256, kBlocks = 256 << 10;
  std::vector<std::unique_ptr<char[]>> blocks;
  blocks.reserve(kBlocks);
  const std::uint64_t before = RssKb();
  for (std::size_t i = 0; i < kBlocks; ++i) {
    blocks.emplace_back(new char[kBlock]);
    std::memset(blocks.back().get(), static_cast<int>(i), kBlock);
  }
  const std::uint64_t grown = RssKb() - before;
  ASSERT_GT(grown, 48u << 10) << "kB";
  for (auto& block : blocks) block.reset();
  // glibc gives it back at once; mimalloc what it can, and the rest (pages freed inside segments
  // still in use) once its decommit delay has passed, on the thread's next allocation.
  std::uint64_t resident = 0;
  testing::Eventually(
      [&] {
        blocks.front().reset(new char[kBlock]);
        blocks.front().reset();
        ReleaseFreeMemory();
        resident = RssKb() - before;
        return resident < grown / 4;
      },
      std::chrono::seconds(2), std::chrono::milliseconds(50));
  EXPECT_LT(resident, grown / 4) << "kB resident of " << grown << " kB freed";
}

}  // namespace
}  // namespace drover
