// Activation scratch (base/scratch.h): large blocks a thread frees come
// back to its next allocation of that size, mapped and not zeroed; the
// cache stays within its bound; small blocks and other threads' caches are
// left alone.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "base/scratch.h"

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

TEST(Scratch, TheCacheKeepsWithinItsBoundAndToItsThread) {
  std::thread([] {
    EXPECT_EQ(cached_scratch_bytes(), 0u);
    {
      ScratchVector<char> small(kScratchCachedFrom / 2);
    }
    EXPECT_EQ(cached_scratch_bytes(), 0u) << "small blocks go back to the heap";
    // Blocks of a quarter of the bound each, five of them alive at once:
    // freed, at most four stay.
    {
      std::vector<ScratchVector<char>> blocks;
      for (int i = 0; i < 5; ++i) blocks.emplace_back(kScratchCacheBytes / 4);
    }
    EXPECT_LE(cached_scratch_bytes(), kScratchCacheBytes);
    EXPECT_GT(cached_scratch_bytes(), 0u);
  }).join();
  // This thread's cache never saw the other's blocks.
  ScratchVector<char> mine(kScratchCacheBytes / 4);
  EXPECT_EQ(mine.size(), kScratchCacheBytes / 4);
}

}  // namespace
}  // namespace dsv4
