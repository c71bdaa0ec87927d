// Storage for weights: a vector that leaves new elements uninitialized (the
// loader writes every byte, and first touching a page on the thread that
// fills it is what spreads page faults over the loading threads), carved
// from large regions on transparent huge pages (2 MiB aligned,
// MADV_HUGEPAGE): a few faults per 2 MiB instead of one per 4 KiB while
// loading, fewer TLB misses while the forward streams through the weights,
// and a handful of mappings for a whole checkpoint (one mapping per tensor
// would pass the kernel's 65530 on the released Pro: 70K experts' matrices).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

namespace dsv4 {

// Bytes from the weight regions, 64-byte aligned; free_weight_bytes with
// the same size gives them back (a region is unmapped when all its pieces
// are).
void* allocate_weight_bytes(size_t bytes);
void free_weight_bytes(void* p, size_t bytes);

template <class T>
class WeightAllocator {
 public:
  using value_type = T;

  WeightAllocator() = default;
  template <class U>
  WeightAllocator(const WeightAllocator<U>&) {}

  T* allocate(size_t n) { return static_cast<T*>(allocate_weight_bytes(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { free_weight_bytes(p, n * sizeof(T)); }

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
