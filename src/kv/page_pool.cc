#include "kv/page_pool.h"

#include "base/check.h"

namespace dsv4 {

PagePool::PagePool(std::string name, int64_t page_bytes, int64_t num_pages)
    : name_(std::move(name)),
      page_bytes_(page_bytes),
      holders_(num_pages, 0) {
  free_.reserve(num_pages);
  for (int64_t i = num_pages - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

int32_t PagePool::allocate() {
  if (free_.empty()) return -1;
  const int32_t id = free_.back();
  free_.pop_back();
  holders_[id] = 1;
  return id;
}

void PagePool::retain(int32_t page) {
  DSV4_CHECK_MSG(in_use(page), "sharing a page that is not in use");
  ++holders_[page];
}

void PagePool::release(int32_t page) {
  DSV4_CHECK_MSG(in_use(page), "releasing a page that is not in use");
  if (--holders_[page] == 0) free_.push_back(page);
}

}  // namespace dsv4
