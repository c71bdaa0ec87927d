// Top-k indices with the reference's tie order. Exact ties are common in the
// indexer (rows whose every head score is cut to 0 by ReLU), so which tied
// row wins must follow PyTorch's CPU topk: nth_element over (value, index)
// pairs, or partial_sort when k * 64 <= n, then a sort of the first k - 1.
#pragma once

#include <cstdint>

namespace dsv4 {

// Writes the indices of the k largest of values[0, n) to out (k <= n), in
// the order torch.topk(largest=True, sorted=True) returns them on CPU.
void topk_like_torch(const float* values, int64_t n, int64_t k, int32_t* out);

}  // namespace dsv4
