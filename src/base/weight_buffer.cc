#include "base/weight_buffer.h"

#include <sys/mman.h>

#include <map>
#include <mutex>

namespace dsv4 {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kRegion = size_t{1} << 30;     // pieces are carved from regions this large
constexpr size_t kOwnMapping = kRegion / 4;     // pieces at least this large get a mapping of their own
constexpr size_t kSmall = 4096;                 // below this, the heap
constexpr size_t kAlign = 64;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// An anonymous mapping of `bytes` (a multiple of kHugePage) starting on a
// huge page, advised onto huge pages (advice: failure is harmless).
void* map_huge(size_t bytes) {
  void* p = mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t base = reinterpret_cast<uintptr_t>(p), aligned = round_up(base, kHugePage);
  if (aligned > base) munmap(p, aligned - base);
  const uintptr_t end = base + bytes + kHugePage, used_end = aligned + bytes;
  if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

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
      current_ = reinterpret_cast<uintptr_t>(map_huge(kRegion));
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
    munmap(reinterpret_cast<void*>(it->first), kRegion);
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
  if (bytes >= kOwnMapping) return map_huge(round_up(bytes, kHugePage));
  return regions().allocate(bytes);
}

void free_weight_bytes(void* p, size_t bytes) {
  if (bytes < kSmall) ::operator delete(p);
  else if (bytes >= kOwnMapping) munmap(p, round_up(bytes, kHugePage));
  else regions().free(p);
}

}  // namespace dsv4
