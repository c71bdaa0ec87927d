#include "base/scratch.h"

#include <algorithm>
#include <bit>
#include <cstdint>

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

// Set once this thread's cache is destroyed: thread_local buffers that
// outlive it (destroyed later at thread exit) free straight to the heap.
thread_local bool t_cache_gone = false;

struct Cache {
  std::vector<std::pair<size_t, void*>> blocks;  // freed, most recent last
  size_t bytes = 0;
  size_t live = 0, peak = 0;  // cached-size blocks this thread has out, now and at most
  ~Cache() {
    for (auto& [size, p] : blocks) ::operator delete(p, kAlign);
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
  if (!cached) return ::operator new(size, kAlign);
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
  return ::operator new(size, kAlign);
}

void free_scratch(void* p, size_t bytes) noexcept {
  if (!p) return;
  if (bytes < kScratchCachedFrom) return ::operator delete(p, kAlign);
  const size_t size = block_size(bytes);
  Cache* cached = cache();
  if (!cached) return ::operator delete(p, kAlign);
  Cache& c = *cached;
  c.live -= std::min(c.live, size);  // a block another thread took out is not counted
  if (size > scratch_cache_bound()) return ::operator delete(p, kAlign);
  // Oldest blocks leave first when the cache would pass its bound.
  while (!c.blocks.empty() && c.bytes + size > scratch_cache_bound()) {
    ::operator delete(c.blocks.front().second, kAlign);
    c.bytes -= c.blocks.front().first;
    c.blocks.erase(c.blocks.begin());
  }
  try {
    c.blocks.emplace_back(size, p);
    c.bytes += size;
  } catch (...) {
    ::operator delete(p, kAlign);
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
