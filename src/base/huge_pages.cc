#include "base/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace dsv4 {
namespace {

size_t whole_pages(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

}  // namespace

void* map_huge_pages(size_t bytes) {
  bytes = whole_pages(bytes);
  // One huge page more than asked, its ends trimmed to the boundary.
  void* p = mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t base = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > base) munmap(p, aligned - base);
  const uintptr_t end = base + bytes + kHugePage, used_end = aligned + bytes;
  if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void unmap_huge_pages(void* p, size_t bytes) noexcept {
  if (p) munmap(p, whole_pages(bytes));
}

}  // namespace dsv4
