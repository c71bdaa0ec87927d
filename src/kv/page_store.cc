#include "kv/page_store.h"

#include <new>

#include "base/check.h"

namespace dsv4 {

PageStore::PageStore(const PageLayout& layout, const std::array<int64_t, kNumCacheFamilies>& num_pages)
    : layout_(layout), num_pages_(num_pages) {
  for (int f = 0; f < kNumCacheFamilies; ++f) {
    const int64_t floats = layout_.families[f].page_floats * num_pages_[f];
    if (floats <= 0) continue;
    // nothrow + our own bad_alloc: the same under sanitizers, whose
    // allocators end the process on a failed throwing new.
    storage_[f].reset(new (std::nothrow) float[static_cast<size_t>(floats)]);
    if (!storage_[f]) throw std::bad_alloc();
  }
}

float* PageStore::page(CacheFamily f, int32_t id) {
  const int i = static_cast<int>(f);
  DSV4_CHECK_MSG(id >= 0 && id < num_pages_[i], "page %d is outside the %s pool", id, family_name(f));
  return storage_[i].get() + static_cast<int64_t>(id) * layout_.families[i].page_floats;
}

int64_t PageStore::bytes() const {
  int64_t n = 0;
  for (int f = 0; f < kNumCacheFamilies; ++f) n += 4 * num_pages_[f] * layout_.families[f].page_floats;
  return n;
}

}  // namespace dsv4
