// Fixed-size float pages of one cache family with a free list. Running out
// is an expected condition (allocate returns -1); freeing a page twice or
// touching a free one is a broken invariant.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dsv4 {

class PagePool {
 public:
  PagePool() = default;
  // Throws std::bad_alloc when the storage cannot be had (the cache manager
  // retries smaller).
  PagePool(std::string name, int64_t page_floats, int64_t num_pages);

  int32_t allocate();  // -1 when none is free
  void release(int32_t page);
  float* page(int32_t id);
  bool in_use(int32_t id) const { return id >= 0 && id < num_pages() && in_use_[id]; }

  const std::string& name() const { return name_; }
  int64_t page_floats() const { return page_floats_; }
  int64_t num_pages() const { return static_cast<int64_t>(in_use_.size()); }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }

 private:
  std::string name_;
  int64_t page_floats_ = 0;
  std::unique_ptr<float[]> storage_;  // uninitialized: a page is written before it is read
  std::vector<int32_t> free_;  // a stack: the most recently freed page is reused first
  std::vector<uint8_t> in_use_;
};

}  // namespace dsv4
