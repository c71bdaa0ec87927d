// Activation scratch (base/scratch.h): large blocks a thread frees come
// back to its next allocation of that size, mapped and not zeroed; the
// cache stays within its thread's working set; small blocks and other
// threads' caches are left alone.
#include <gtest/gtest.h>

#include <cstring>
#include <sys/mman.h>
#include <thread>

#include "base/huge_pages.h"
#include "base/scratch.h"
#include "test_util.h"

namespace dsv4 {
namespace {

TEST(Scratch, AFreedLargeBlockIsTheNextOneOfItsSize) {
  const size_t floats = (size_t{4} << 20) / sizeof(float);
  const float* first = nullptr;
  {
    ScratchVector<float> a(floats);
    a[0] = 42.0f;  // left as it is: a scratch vector does not zero
    first = a.data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
  }
  EXPECT_GE(cached_scratch_bytes(), floats * sizeof(float));
  // A little smaller still rounds to the same block.
  ScratchVector<float> b(floats - 100);
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(b[0], 42.0f);
  // Asked for with a value, elements are set as std::vector sets them.
  ScratchVector<float> c(floats, 1.5f);
  EXPECT_NE(c.data(), first);
  EXPECT_EQ(c[floats - 1], 1.5f);
}

constexpr size_t kBlock = size_t{64} << 20;

TEST(Scratch, TheCacheKeepsWithinItsThreadsWorkingSetAndToItsThread) {
  std::thread([] {
    EXPECT_EQ(cached_scratch_bytes(), 0u);
    {
      ScratchVector<char> small(kScratchCachedFrom / 2);
    }
    EXPECT_EQ(cached_scratch_bytes(), 0u) << "small blocks go back to the heap";
    // Five blocks alive at once (a layer's buffers): all five stay for the
    // next layer.
    {
      std::vector<ScratchVector<char>> blocks;
      for (int i = 0; i < 5; ++i) blocks.emplace_back(kBlock);
    }
    EXPECT_EQ(scratch_cache_bound(), 10 * kBlock);
    EXPECT_EQ(cached_scratch_bytes(), 5 * kBlock);
    // The next layer takes them back: nothing new, the cache empties.
    {
      std::vector<ScratchVector<char>> blocks;
      for (int i = 0; i < 5; ++i) blocks.emplace_back(kBlock);
      EXPECT_EQ(cached_scratch_bytes(), 0u);
    }
    // Blocks of other sizes (another phase's) stay beside them up to twice
    // the working set; then the oldest leave.
    {
      ScratchVector<char> other(4 * kBlock);
    }
    EXPECT_EQ(cached_scratch_bytes(), 9 * kBlock);
    {
      ScratchVector<char> other(3 * kBlock);
    }
    EXPECT_EQ(cached_scratch_bytes(), 10 * kBlock) << "two of the first five left";
    EXPECT_EQ(scratch_cache_bound(), 10 * kBlock);
  }).join();
  // A fresh thread's cache never saw the other's blocks; a block it frees
  // that another thread took out is past its own working set: not kept.
  ScratchVector<char> theirs;
  std::thread([&] { theirs = ScratchVector<char>(kBlock); }).join();
  std::thread([&] {
    EXPECT_EQ(cached_scratch_bytes(), 0u);
    ScratchVector<char>().swap(theirs);
    EXPECT_EQ(cached_scratch_bytes(), 0u);
  }).join();
}

// Blocks of 8 MiB and more (a prefill chunk's buffers) start on a huge
// page, so their first use faults in 2 MiB at a time; AddressSanitizer
// builds leave them on its checked heap.
TEST(Scratch, LargeBlocksStartOnAHugePage) {
  std::thread([] {
    ScratchVector<char> big(size_t{8} << 20), bigger((size_t{40} << 20) + 1);
    big.front() = 1, big.back() = 2, bigger.back() = 3;  // writable to their ends
    if (testing::kSanitized) return;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % kHugePage, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(bigger.data()) % kHugePage, 0u);
  }).join();
}

// A new large block comes with every page in memory: no kernel writing
// into it meets a page's first write (on a prefill chunk's outputs, the
// first tile writing a panel's column met all of them).
TEST(Scratch, ANewLargeBlockHasEveryPageInMemory) {
  std::thread([] {
    const size_t bytes = size_t{24} << 20;
    ScratchVector<char> fresh(bytes);
    if (testing::kSanitized) return;  // on the checked heap, not mapped here
    std::vector<unsigned char> resident(bytes / 4096);
    ASSERT_EQ(mincore(fresh.data(), bytes, resident.data()), 0);
    size_t in = 0;
    for (unsigned char r : resident) in += r & 1;
    EXPECT_EQ(in, resident.size());
  }).join();
}

}  // namespace
}  // namespace dsv4
