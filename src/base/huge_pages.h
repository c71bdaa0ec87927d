// Anonymous memory on transparent huge pages: a mapping that starts on a
// 2 MiB boundary, advised MADV_HUGEPAGE (advice: failure is harmless).
// One page fault per 2 MiB instead of one per 4 KiB when first written
// (on virtual machines a fault can cost ~10 us: seconds per GiB), and
// fewer TLB misses while kernels stream through it.
#pragma once

#include <cstddef>

namespace dsv4 {

inline constexpr size_t kHugePage = size_t{2} << 20;

// `bytes` is rounded up to whole huge pages (unmap_huge_pages rounds alike).
// Throws std::bad_alloc when the kernel refuses the mapping.
void* map_huge_pages(size_t bytes);
void unmap_huge_pages(void* p, size_t bytes) noexcept;

}  // namespace dsv4
