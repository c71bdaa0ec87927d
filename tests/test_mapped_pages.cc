// Mapped pages (base/mapped_pages.h), the KV cache's memory: zero when
// first read, writable end to end, a fault one byte past either end, a
// refusal as std::bad_alloc, and nothing left mapped once freed.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <new>
#include <utility>

#include "base/mapped_pages.h"

namespace dsv4 {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

bool mapped(const void* p) {
  unsigned char residency = 0;
  // mincore fails with ENOMEM on an address no mapping covers.
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) / kPage * kPage);
  return mincore(page, 1, &residency) == 0;
}

TEST(MappedPages, ZeroWhenFirstReadAndWritableEndToEnd) {
  const size_t bytes = 3 * kPage + 100;
  MappedPages m(bytes);
  ASSERT_NE(m.data(), nullptr);
  EXPECT_EQ(m.size(), bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data()) % kPage, 0u);
  for (size_t i = 0; i < bytes; i += 997) EXPECT_EQ(m.data()[i], 0) << i;
  m.data()[0] = 1;
  m.data()[bytes - 1] = 2;
  EXPECT_EQ(m.data()[bytes - 1], 2);
}

TEST(MappedPages, MovingHandsOverTheMappingAndFreeingUnmapsIt) {
  MappedPages a(kPage);
  uint8_t* data = a.data();
  data[5] = 7;
  MappedPages b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.data()[5], 7);
  b = MappedPages();
  EXPECT_FALSE(mapped(data));
}

TEST(MappedPages, ARefusedMappingIsBadAlloc) {
  // 64 TiB: more than any machine this runs on holds, so the kernel's
  // overcommit check refuses it.
  EXPECT_THROW(MappedPages(size_t{1} << 46), std::bad_alloc);
}

TEST(MappedPagesDeathTest, OneBytePastEitherEndFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  MappedPages m(2 * kPage);
  volatile uint8_t* data = m.data();
  EXPECT_DEATH(data[2 * kPage] = 1, "");
  EXPECT_DEATH(data[-1] = 1, "");
  EXPECT_DEATH((void)data[2 * kPage], "");
}

}  // namespace
}  // namespace dsv4
