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
#include <vector>

#include "base/uninitialized_allocator.h"

namespace dsv4 {

// Bytes from the weight regions, 64-byte aligned; free_weight_bytes with
// the same size gives them back (a region is unmapped when all its pieces
// are).
void* allocate_weight_bytes(size_t bytes);
void free_weight_bytes(void* p, size_t bytes);

template <class T>
using WeightAllocator = UninitializedAllocator<T, allocate_weight_bytes, free_weight_bytes>;

template <class T>
using WeightBuffer = std::vector<T, WeightAllocator<T>>;

}  // namespace dsv4
