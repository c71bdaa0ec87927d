#include "base/weight_buffer.h"

#include <cstdint>
#include <map>
#include <mutex>

#include "base/huge_pages.h"

namespace dsv4 {
namespace {

constexpr size_t kRegion = size_t{1} << 30;     // pieces are carved from regions this large
constexpr size_t kOwnMapping = kRegion / 4;     // pieces at least this large get a mapping of their own
constexpr size_t kSmall = 4096;                 // below this, the heap
constexpr size_t kAlign = 64;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

struct Region {
  size_t used = 0;  // bytes carved so far
  size_t live = 0;  // pieces not yet given back
};

// The regions by start address; pieces come from the newest one.
class Regions {
 public:
  void* allocate(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t need = round_up(bytes, kAlign);
    if (current_ == 0 || regions_[current_].used + need > kRegion) {
      current_ = reinterpret_cast<uintptr_t>(map_huge_pages(kRegion));
      regions_[current_] = Region{};
    }
    Region& r = regions_[current_];
    void* p = reinterpret_cast<void*>(current_ + r.used);
    r.used += need;
    ++r.live;
    return p;
  }

  void free(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.upper_bound(reinterpret_cast<uintptr_t>(p));
    --it;  // the region holding p
    if (--it->second.live) return;
    unmap_huge_pages(reinterpret_cast<void*>(it->first), kRegion);
    if (it->first == current_) current_ = 0;
    regions_.erase(it);
  }

 private:
  std::mutex mu_;
  std::map<uintptr_t, Region> regions_;
  uintptr_t current_ = 0;
};

Regions& regions() {
  static Regions* r = new Regions();  // never destroyed: weights may outlive static destructors
  return *r;
}

}  // namespace

void* allocate_weight_bytes(size_t bytes) {
  if (bytes < kSmall) return ::operator new(bytes);
  if (bytes >= kOwnMapping) return map_huge_pages(bytes);
  return regions().allocate(bytes);
}

void free_weight_bytes(void* p, size_t bytes) {
  if (bytes < kSmall) ::operator delete(p);
  else if (bytes >= kOwnMapping) unmap_huge_pages(p, bytes);
  else regions().free(p);
}

}  // namespace dsv4
