// DeepSeek-V4.1's sparse_attn for one query row with a lane per key (the
// scores) and a lane per dimension (the weighted values). Every lane does
// the generic body's operations in its order, so the bits are its bits:
// a score is a left-to-right dot times the scale, a value sum adds its
// products in key order from zero. A block's 64 keys are transposed once
// and read by every head (one KV head serves them all).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/avx512/avx512_kernels.h"
#include "kernels/generic/generic_kernels.h"

namespace dsv4::kernels::avx512 {
namespace {
constexpr int64_t kAttnBlock = 64;
constexpr int64_t kLanes = 16;
}  // namespace

void v41_sparse_attention(const float* q, int64_t heads, int64_t dim, const float* const* kv, int64_t n,
                          const float* sinks, float scale, float* out) {
  if (dim % kLanes) {
    generic::v41_sparse_attention(q, heads, dim, kv, n, sinks, scale, out);
    return;
  }
  std::vector<float> keys(dim * kAttnBlock), dots(kAttnBlock), s(kAttnBlock), acc(heads * dim, 0.0f);
  std::vector<float> running_max(heads, -1e30f), sum_exp(heads, 0.0f);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < n; b0 += kAttnBlock) {
    const int64_t blk = std::min(kAttnBlock, n - b0), groups = (blk + kLanes - 1) / kLanes;
    // keys[d][j]: key j's dimension d (0 for an unused index or past the block).
    std::fill(keys.begin(), keys.end(), 0.0f);
    for (int64_t j = 0; j < blk; ++j)
      if (const float* k = kv[b0 + j])
        for (int64_t d = 0; d < dim; ++d) keys[d * kAttnBlock + j] = k[d];
    for (int64_t h = 0; h < heads; ++h) {
      const float* qh = q + h * dim;
      for (int64_t g = 0; g < groups; ++g) {
        __m512 sum = zero;
        for (int64_t d = 0; d < dim; ++d)
          sum = _mm512_add_ps(sum, _mm512_mul_ps(_mm512_set1_ps(qh[d]), _mm512_loadu_ps(&keys[d * kAttnBlock + g * kLanes])));
        _mm512_storeu_ps(&dots[g * kLanes], sum);
      }
      float block_max = -INFINITY;
      for (int64_t j = 0; j < blk; ++j) {
        s[j] = kv[b0 + j] ? dots[j] * scale : -INFINITY;
        block_max = std::fmax(block_max, s[j]);
      }
      const float new_max = std::fmax(running_max[h], block_max);
      const float rescale = vexp(running_max[h] - new_max);
      for (int64_t j = 0; j < blk; ++j) s[j] = vexp(s[j] - new_max);
      sum_exp[h] = sum_exp[h] * rescale + sum(s.data(), blk);
      float* acc_h = &acc[h * dim];
      const __m512 r = _mm512_set1_ps(rescale);
      for (int64_t d0 = 0; d0 < dim; d0 += kLanes) {
        __m512 pv = zero;
        for (int64_t j = 0; j < blk; ++j) {
          const float* k = kv[b0 + j];
          pv = _mm512_add_ps(pv, _mm512_mul_ps(_mm512_set1_ps(s[j]), k ? _mm512_loadu_ps(k + d0) : zero));
        }
        _mm512_storeu_ps(acc_h + d0, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(acc_h + d0), r), pv));
      }
      running_max[h] = new_max;
    }
  }
  for (int64_t h = 0; h < heads; ++h) {
    const float total = sum_exp[h] + vexp(sinks[h] - running_max[h]);
    const __m512 t = _mm512_set1_ps(total);
    for (int64_t d0 = 0; d0 < dim; d0 += kLanes)
      _mm512_storeu_ps(out + h * dim + d0, _mm512_div_ps(_mm512_loadu_ps(&acc[h * dim + d0]), t));
  }
}

}  // namespace dsv4::kernels::avx512
