#include "kv/page_store.h"

#include <new>

#include "base/check.h"

namespace dsv4 {

void PageStore::Free::operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(kPageAlign)); }

PageStore::PageStore(const PageLayout& layout, const std::array<int64_t, kNumCacheFamilies>& num_pages)
    : layout_(layout), num_pages_(num_pages) {
  for (int f = 0; f < kNumCacheFamilies; ++f) {
    const int64_t bytes = layout_.families[f].page_bytes * num_pages_[f];
    if (bytes <= 0) continue;
    // nothrow + our own bad_alloc: the same under sanitizers, whose
    // allocators end the process on a failed throwing new. Aligned so the
    // state pages hold floats and rows start on cache lines.
    storage_[f].reset(static_cast<uint8_t*>(
        ::operator new[](static_cast<size_t>(bytes), std::align_val_t(kPageAlign), std::nothrow)));
    if (!storage_[f]) throw std::bad_alloc();
  }
}

uint8_t* PageStore::page(CacheFamily f, int32_t id) {
  const int i = static_cast<int>(f);
  DSV4_CHECK_MSG(id >= 0 && id < num_pages_[i], "page %d is outside the %s pool", id, family_name(f));
  return storage_[i].get() + static_cast<int64_t>(id) * layout_.families[i].page_bytes;
}

int64_t PageStore::bytes() const {
  int64_t n = 0;
  for (int f = 0; f < kNumCacheFamilies; ++f) n += num_pages_[f] * layout_.families[f].page_bytes;
  return n;
}

}  // namespace dsv4
