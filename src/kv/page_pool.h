// The page ids of one cache family with a free list (the memory is in each
// rank's PageStore). A page has holders (requests, the prefix cache): it is
// free again when the last one releases it. Running out is an expected
// condition (allocate returns -1); releasing a free page is a broken
// invariant.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsv4 {

class PagePool {
 public:
  PagePool() = default;
  PagePool(std::string name, int64_t page_bytes, int64_t num_pages);

  int32_t allocate();            // one holder; -1 when none is free
  void retain(int32_t page);     // one holder more
  void release(int32_t page);    // one holder fewer
  bool in_use(int32_t id) const { return id >= 0 && id < num_pages() && holders_[id] > 0; }
  int32_t holders(int32_t id) const { return holders_[id]; }

  const std::string& name() const { return name_; }
  int64_t page_bytes() const { return page_bytes_; }
  int64_t num_pages() const { return static_cast<int64_t>(holders_.size()); }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }

 private:
  std::string name_;
  int64_t page_bytes_ = 0;
  std::vector<int32_t> free_;  // a stack: the most recently freed page is reused first
  std::vector<int32_t> holders_;
};

}  // namespace dsv4
