// The memory behind the seven page pools, for one rank. The scheduler hands
// out page ids (PagePool) without touching memory; every rank of a
// tensor-parallel group computes the same KV rows, so each holds its own
// copy of the pages under the same ids.
#pragma once

#include <array>
#include <cstdint>

#include "base/mapped_pages.h"
#include "kv/page_layout.h"

namespace dsv4 {

class PageStore {
 public:
  // num_pages per family. Throws std::bad_alloc when the memory cannot be
  // had (the cache manager retries smaller).
  PageStore(const PageLayout& layout, const std::array<int64_t, kNumCacheFamilies>& num_pages);

  uint8_t* page(CacheFamily f, int32_t id);
  const PageLayout& layout() const { return layout_; }
  int64_t bytes() const;
  // Each family's memory, [at, at + bytes).
  template <class Fn>
  void for_each_region(Fn&& fn) const {
    for (int f = 0; f < kNumCacheFamilies; ++f)
      if (storage_[f].data()) fn(static_cast<const void*>(storage_[f].data()), num_pages_[f] * layout_.families[f].page_bytes);
  }

 private:
  PageLayout layout_;
  std::array<int64_t, kNumCacheFamilies> num_pages_;
  // Mapped, not from the heap (mapped_pages.h): most of a cache's pages
  // are never touched. A page is written before it is read.
  std::array<MappedPages, kNumCacheFamilies> storage_;
};

}  // namespace dsv4
