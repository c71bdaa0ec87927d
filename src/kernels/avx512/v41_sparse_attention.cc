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
constexpr int64_t kAttnBlock = 64;  // 4 groups of kLanes keys
constexpr int64_t kLanes = 16;

// dots[h][j] for heads [h0, h0 + H) and the block's four groups of 16 keys:
// 4 H independent sums side by side (a lane's adds still in dimension
// order), so the adds do not wait on each other.
// a + b * c: two roundings (exact numerics) or one (fast).
template <bool Fused>
inline __m512 multiply_add(__m512 a, __m512 b, __m512 c) {
  if constexpr (Fused) return _mm512_fmadd_ps(b, c, a);
  else return _mm512_add_ps(a, _mm512_mul_ps(b, c));
}

template <int H, bool Fused>
void head_dots(const float* q, int64_t h0, int64_t dim, const float* keys, float* dots) {
  __m512 sum[H][4];
  for (int i = 0; i < H; ++i)
    for (int g = 0; g < 4; ++g) sum[i][g] = _mm512_setzero_ps();
  for (int64_t d = 0; d < dim; ++d) {
    const float* kd = keys + d * kAttnBlock;
    const __m512 k0 = _mm512_loadu_ps(kd), k1 = _mm512_loadu_ps(kd + 16), k2 = _mm512_loadu_ps(kd + 32),
                 k3 = _mm512_loadu_ps(kd + 48);
    for (int i = 0; i < H; ++i) {
      const __m512 qd = _mm512_set1_ps(q[(h0 + i) * dim + d]);
      sum[i][0] = multiply_add<Fused>(sum[i][0], qd, k0);
      sum[i][1] = multiply_add<Fused>(sum[i][1], qd, k1);
      sum[i][2] = multiply_add<Fused>(sum[i][2], qd, k2);
      sum[i][3] = multiply_add<Fused>(sum[i][3], qd, k3);
    }
  }
  for (int i = 0; i < H; ++i)
    for (int g = 0; g < 4; ++g) _mm512_storeu_ps(dots + i * kAttnBlock + g * kLanes, sum[i][g]);
}

template <bool Fused>
void attend(const float* q, int64_t heads, int64_t dim, const float* const* kv, int64_t n, const float* sinks,
            float scale, float* out) {
  std::vector<float> keys(dim * kAttnBlock), dots(heads * kAttnBlock), s(kAttnBlock), acc(heads * dim, 0.0f);
  std::vector<float> running_max(heads, -1e30f), sum_exp(heads, 0.0f);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < n; b0 += kAttnBlock) {
    const int64_t blk = std::min(kAttnBlock, n - b0);
    // keys[d][j]: key j's dimension d (0 for an unused index or past the block).
    std::fill(keys.begin(), keys.end(), 0.0f);
    for (int64_t j = 0; j < blk; ++j)
      if (const float* k = kv[b0 + j])
        for (int64_t d = 0; d < dim; ++d) keys[d * kAttnBlock + j] = k[d];
    int64_t h = 0;
    for (; h + 2 <= heads; h += 2) head_dots<2, Fused>(q, h, dim, keys.data(), &dots[h * kAttnBlock]);
    if (h < heads) head_dots<1, Fused>(q, h, dim, keys.data(), &dots[h * kAttnBlock]);
    for (h = 0; h < heads; ++h) {
      float block_max = -INFINITY;
      for (int64_t j = 0; j < blk; ++j) {
        s[j] = kv[b0 + j] ? dots[h * kAttnBlock + j] * scale : -INFINITY;
        block_max = std::fmax(block_max, s[j]);
      }
      const float new_max = std::fmax(running_max[h], block_max);
      const float rescale = vexp(running_max[h] - new_max);
      for (int64_t j = 0; j < blk; ++j) s[j] = vexp(s[j] - new_max);
      sum_exp[h] = sum_exp[h] * rescale + sum(s.data(), blk);
      float* acc_h = &acc[h * dim];
      const __m512 r = _mm512_set1_ps(rescale);
      // Four runs of 16 dimensions side by side, each adding in key order.
      int64_t d0 = 0;
      for (; d0 + 4 * kLanes <= dim; d0 += 4 * kLanes) {
        __m512 pv[4] = {zero, zero, zero, zero};
        for (int64_t j = 0; j < blk; ++j) {
          const float* k = kv[b0 + j];
          const __m512 sj = _mm512_set1_ps(s[j]);
          for (int i = 0; i < 4; ++i)
            pv[i] = multiply_add<Fused>(pv[i], sj, k ? _mm512_loadu_ps(k + d0 + i * kLanes) : zero);
        }
        for (int i = 0; i < 4; ++i) {
          float* a = acc_h + d0 + i * kLanes;
          _mm512_storeu_ps(a, multiply_add<Fused>(pv[i], _mm512_loadu_ps(a), r));
        }
      }
      for (; d0 < dim; d0 += kLanes) {
        __m512 pv = zero;
        for (int64_t j = 0; j < blk; ++j) {
          const float* k = kv[b0 + j];
          pv = multiply_add<Fused>(pv, _mm512_set1_ps(s[j]), k ? _mm512_loadu_ps(k + d0) : zero);
        }
        _mm512_storeu_ps(acc_h + d0, multiply_add<Fused>(pv, _mm512_loadu_ps(acc_h + d0), r));
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

}  // namespace

void v41_sparse_attention(const float* q, int64_t heads, int64_t dim, const float* const* kv, int64_t n,
                          const float* sinks, float scale, float* out) {
  if (dim % kLanes) return generic::v41_sparse_attention(q, heads, dim, kv, n, sinks, scale, out);
  attend<false>(q, heads, dim, kv, n, sinks, scale, out);
}

// Fast numerics: every product fused into its sum (the same order).
void v41_sparse_attention_fast(const float* q, int64_t heads, int64_t dim, const float* const* kv, int64_t n,
                               const float* sinks, float scale, float* out) {
  if (dim % kLanes) return generic::v41_sparse_attention(q, heads, dim, kv, n, sinks, scale, out);
  attend<true>(q, heads, dim, kv, n, sinks, scale, out);
}

}  // namespace dsv4::kernels::avx512
