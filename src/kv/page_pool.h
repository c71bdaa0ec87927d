// The page ids of one cache family with a free list (the memory is in each
// rank's PageStore). Running out is an expected condition (allocate returns
// -1); freeing a page twice is a broken invariant.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsv4 {

class PagePool {
 public:
  PagePool() = default;
  PagePool(std::string name, int64_t page_floats, int64_t num_pages);

  int32_t allocate();  // -1 when none is free
  void release(int32_t page);
  bool in_use(int32_t id) const { return id >= 0 && id < num_pages() && in_use_[id]; }

  const std::string& name() const { return name_; }
  int64_t page_floats() const { return page_floats_; }
  int64_t num_pages() const { return static_cast<int64_t>(in_use_.size()); }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }

 private:
  std::string name_;
  int64_t page_floats_ = 0;
  std::vector<int32_t> free_;  // a stack: the most recently freed page is reused first
  std::vector<uint8_t> in_use_;
};

}  // namespace dsv4
