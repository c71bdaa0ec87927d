// Activation scratch: a vector whose new elements are left uninitialized,
// its large blocks reused from a per-thread cache.
//
// A prefill chunk allocates the same large activation buffers in every
// layer (4096 tokens of 64 heads x 512 query floats are 512 MiB). As plain
// std::vector<float> each was zero-filled by the rank's thread and, being
// above malloc's mapping threshold, mapped afresh and page-faulted every
// time: serial work that left the pool's workers idle (bench --simulate
// measured it at most of a 4K prefill chunk's time on 64 workers). A
// ScratchVector is written by the kernels that fill it, so nothing is
// zeroed, and a freed large block goes back to its thread's cache for the
// next layer, its pages still mapped. Blocks of 8 MiB or more are mapped
// on transparent huge pages (base/huge_pages.h), every page faulted in as
// the block is mapped, so that no tile meets a page's first write.
#pragma once

#include <cstddef>
#include <vector>

#include "base/uninitialized_allocator.h"

namespace dsv4 {

// Bytes for scratch, 64-byte aligned. Blocks of kScratchCachedFrom bytes or
// more come from, and go back to, the calling thread's cache; smaller ones
// go to the heap (which would hand blocks of tens of KiB, a decode step's
// expert slots, back to the system when freed at its top, and each next
// step would fault their pages in again on the rank's thread). A thread's
// cache holds at most twice the most cached-size scratch the thread has had
// live at once, oldest blocks leaving first. A layer reuses the union of
// its phases' buffers (attention's and the experts' differ in size), which
// one working set does not hold: with that bound, or the fixed 2 GiB before
// it, a 4K prefill chunk's buffers were unmapped and faulted in again every
// layer, most of the chunk's serial time on a simulated 64-core node.
inline constexpr size_t kScratchCachedFrom = size_t{32} << 10;
void* allocate_scratch(size_t bytes);
void free_scratch(void* p, size_t bytes) noexcept;
// What this thread's cache holds now, and its bound (for tests).
size_t cached_scratch_bytes();
size_t scratch_cache_bound();

template <class T>
using ScratchAllocator = UninitializedAllocator<T, allocate_scratch, free_scratch>;

template <class T>
using ScratchVector = std::vector<T, ScratchAllocator<T>>;

}  // namespace dsv4
