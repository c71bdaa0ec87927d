#include "base/scratch.h"

#include <algorithm>
#include <bit>
#include <cstdint>

#include <sys/mman.h>

#include "base/huge_pages.h"
#include "base/thread_pool.h"

namespace dsv4 {
namespace {

constexpr std::align_val_t kAlign{64};

// Large blocks round up to one of four sizes per power of two (at most 25%
// more than asked), so that a layer's buffers, which differ a little from
// one call to the next, still find their block.
size_t block_size(size_t bytes) {
  const size_t step = std::bit_floor(bytes) / 4;
  return (bytes + step - 1) / step * step;
}

// Blocks of 8 MiB or more (whole huge pages: block_size's steps are) are
// mapped on huge pages: a prefill chunk's buffers are hundreds of MiB, and
// their first use faults them in on the rank's thread. Smaller ones, and
// every block in AddressSanitizer builds (whose heap checks the bounds of
// what it hands out), come from the heap.
#if defined(__SANITIZE_ADDRESS__)
#define DSV4_SCRATCH_ON_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DSV4_SCRATCH_ON_HEAP 1
#endif
#endif
#ifdef DSV4_SCRATCH_ON_HEAP
constexpr size_t kMappedFrom = SIZE_MAX;
#else
constexpr size_t kMappedFrom = 4 * kHugePage;
#endif

// A mapped block's pages, every one faulted in when it is mapped, in a
// pool job of a huge page a task (on the rank's pool: its node's cores, so the
// pages land on its node, as the kernels' first writes put them); once, as
// the block then stays in its thread's cache. Left to the kernels, a
// page's first write (zeroing it, and with huge pages often compacting
// memory first) fell on whichever tile wrote it first. An output written a
// panel's column at a time has a row on every page, so its first tile
// faulted them all: a 4K prefill chunk's queries (256 MiB) made tile 0 of
// wq_b's job take 8-35 ms against the others' 1.3-1.9 (bench --simulate,
// 2 x 192). And a block a smaller buffer had used came back with pages no
// one had touched, so even a warm chunk met them. Faulted in on the
// allocating thread alone, a chunk's new blocks (the experts' buffers,
// sized by routing) were serial time instead.
void* new_mapped_block(size_t size) {
  void* p = map_huge_pages(size);
  constexpr int64_t kPagesATask = 1;
  parallel_for(static_cast<int64_t>(size / kHugePage), kPagesATask, [&](int64_t a, int64_t b) {
    char* at = static_cast<char*>(p) + a * kHugePage;
    const size_t n = static_cast<size_t>(b - a) * kHugePage;
    if (madvise(at, n, MADV_POPULATE_WRITE) != 0)  // before Linux 5.14: a write a page
      for (size_t i = 0; i < n; i += 4096) static_cast<volatile char*>(at)[i] = 0;
  });
  return p;
}

void* new_block(size_t size) { return size >= kMappedFrom ? new_mapped_block(size) : ::operator new(size, kAlign); }
void delete_block(void* p, size_t size) noexcept {
  if (size >= kMappedFrom) unmap_huge_pages(p, size);
  else ::operator delete(p, kAlign);
}

// Set once this thread's cache is destroyed: thread_local buffers that
// outlive it (destroyed later at thread exit) free straight to the heap.
thread_local bool t_cache_gone = false;

struct Cache {
  std::vector<std::pair<size_t, void*>> blocks;  // freed, most recent last
  size_t bytes = 0;
  size_t live = 0, peak = 0;  // cached-size blocks this thread has out, now and at most
  ~Cache() {
    for (auto& [size, p] : blocks) delete_block(p, size);
    t_cache_gone = true;
  }
};

Cache* cache() {
  if (t_cache_gone) return nullptr;
  thread_local Cache c;
  return &c;
}

}  // namespace

void* allocate_scratch(size_t bytes) {
  if (bytes < kScratchCachedFrom) return ::operator new(std::max<size_t>(bytes, 1), kAlign);
  const size_t size = block_size(bytes);
  Cache* cached = cache();
  if (!cached) return new_block(size);
  Cache& c = *cached;
  c.live += size;
  c.peak = std::max(c.peak, c.live);
  for (size_t i = c.blocks.size(); i-- > 0;) {
    if (c.blocks[i].first != size) continue;
    void* p = c.blocks[i].second;
    c.blocks.erase(c.blocks.begin() + static_cast<std::ptrdiff_t>(i));
    c.bytes -= size;
    return p;
  }
  return new_block(size);
}

void free_scratch(void* p, size_t bytes) noexcept {
  if (!p) return;
  if (bytes < kScratchCachedFrom) return ::operator delete(p, kAlign);
  const size_t size = block_size(bytes);
  Cache* cached = cache();
  if (!cached) return delete_block(p, size);
  Cache& c = *cached;
  c.live -= std::min(c.live, size);  // a block another thread took out is not counted
  if (size > scratch_cache_bound()) return delete_block(p, size);
  // Oldest blocks leave first when the cache would pass its bound.
  while (!c.blocks.empty() && c.bytes + size > scratch_cache_bound()) {
    delete_block(c.blocks.front().second, c.blocks.front().first);
    c.bytes -= c.blocks.front().first;
    c.blocks.erase(c.blocks.begin());
  }
  try {
    c.blocks.emplace_back(size, p);
    c.bytes += size;
  } catch (...) {
    delete_block(p, size);
  }
}

size_t cached_scratch_bytes() {
  const Cache* c = cache();
  return c ? c->bytes : 0;
}

size_t scratch_cache_bound() {
  const Cache* c = cache();
  return c ? 2 * c->peak : 0;
}

}  // namespace dsv4
