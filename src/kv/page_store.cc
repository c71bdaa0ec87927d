#include "kv/page_store.h"

#include "base/check.h"

namespace dsv4 {

PageStore::PageStore(const PageLayout& layout, const std::array<int64_t, kNumCacheFamilies>& num_pages)
    : layout_(layout), num_pages_(num_pages) {
  for (int f = 0; f < kNumCacheFamilies; ++f) {
    const int64_t bytes = layout_.families[f].page_bytes * num_pages_[f];
    if (bytes <= 0) continue;
    // Page-aligned, so the state pages hold floats and rows start on cache
    // lines (kPageAlign); a refused mapping throws std::bad_alloc.
    storage_[f] = MappedPages(static_cast<size_t>(bytes));
  }
}

uint8_t* PageStore::page(CacheFamily f, int32_t id) {
  const int i = static_cast<int>(f);
  DSV4_CHECK_MSG(id >= 0 && id < num_pages_[i], "page %d is outside the %s pool", id, family_name(f));
  return storage_[i].data() + static_cast<int64_t>(id) * layout_.families[i].page_bytes;
}

int64_t PageStore::bytes() const {
  int64_t n = 0;
  for (int f = 0; f < kNumCacheFamilies; ++f) n += num_pages_[f] * layout_.families[f].page_bytes;
  return n;
}

}  // namespace dsv4
