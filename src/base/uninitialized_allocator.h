// An allocator whose vectors leave new trivial elements uninitialized
// (resize() writes nothing), its bytes from a pair of functions: the
// weight regions (weight_buffer.h), the activation scratch (scratch.h).
#pragma once

#include <cstddef>
#include <new>
#include <utility>

namespace dsv4 {

template <class T, auto Allocate, auto Free>
class UninitializedAllocator {
 public:
  using value_type = T;
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U, Allocate, Free>;
  };

  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U, Allocate, Free>&) {}

  T* allocate(size_t n) { return static_cast<T*>(Allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { Free(p, n * sizeof(T)); }

  // Default-initialization: resize() leaves trivial elements as they are.
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }

  friend bool operator==(const UninitializedAllocator&, const UninitializedAllocator&) { return true; }
};

}  // namespace dsv4
