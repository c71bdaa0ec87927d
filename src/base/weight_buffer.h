// Storage for weights: a vector that leaves new elements uninitialized (the
// loader writes every byte, and first touching a page on the thread that
// fills it is what spreads page faults over the loading threads) and puts
// large buffers on transparent huge pages (2 MiB aligned, MADV_HUGEPAGE):
// a few faults per buffer instead of one per 4 KiB while loading, and fewer
// TLB misses while the forward streams through the weights.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

namespace dsv4 {

template <class T>
class WeightAllocator {
 public:
  using value_type = T;
  static constexpr size_t kHugePage = size_t{2} << 20, kSmallPage = 4096;

  WeightAllocator() = default;
  template <class U>
  WeightAllocator(const WeightAllocator<U>&) {}

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) return static_cast<T*>(::operator new(bytes));
    // Over-map by one huge page and trim both ends to an aligned range; the
    // tail past the last whole huge page stays on small pages (a buffer just
    // over a huge page would otherwise hold almost twice its size).
    const size_t rounded = (bytes + kSmallPage - 1) / kSmallPage * kSmallPage;
    void* p = mmap(nullptr, rounded + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t base = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
    if (aligned > base) munmap(p, aligned - base);
    const uintptr_t end = base + rounded + kHugePage, used_end = aligned + rounded;
    if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
    madvise(reinterpret_cast<void*>(aligned), bytes / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice: failure is harmless
    return reinterpret_cast<T*>(aligned);
  }

  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) {
      ::operator delete(p);
      return;
    }
    munmap(p, (bytes + kSmallPage - 1) / kSmallPage * kSmallPage);
  }

  // Default-initialization: resize() leaves trivial elements as they are.
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }

  friend bool operator==(const WeightAllocator&, const WeightAllocator&) { return true; }
};

template <class T>
using WeightBuffer = std::vector<T, WeightAllocator<T>>;

}  // namespace dsv4
