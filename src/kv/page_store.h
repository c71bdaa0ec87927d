// The memory behind the seven page pools, for one rank. The scheduler hands
// out page ids (PagePool) without touching memory; every rank of a
// tensor-parallel group computes the same KV rows, so each holds its own
// copy of the pages under the same ids.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

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
      if (storage_[f]) fn(static_cast<const void*>(storage_[f].get()), num_pages_[f] * layout_.families[f].page_bytes);
  }

 private:
  PageLayout layout_;
  std::array<int64_t, kNumCacheFamilies> num_pages_;
  // Uninitialized: a page is written before it is read.
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::array<std::unique_ptr<uint8_t[], Free>, kNumCacheFamilies> storage_;
};

}  // namespace dsv4
