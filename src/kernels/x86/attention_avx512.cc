// Dot products of query heads with shared keys, and sink attention for up
// to 16 query heads sharing their key slots, on AVX-512. Scores: the heads sit in the 16 lanes (q transposed to
// [dim][16]) and each key element is broadcast, so every (head, slot) dot
// product still adds its products left to right; eight slots at a time keep
// eight independent sums in flight. Weighted sum: the dimensions sit in the
// lanes and the slots are added in order. The softmax is the generic one.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/kernels.h"

#define DSV4_AVX512 __attribute__((target("avx512f")))

namespace dsv4::kernels {
namespace {

constexpr int kSlotsAtOnce = 8;

// dots[j * key_stride + h * head_stride] = (q[h] . keys[j]) * scale for
// keys [j0, j0 + S) and the heads in `lanes` (q transposed: qt[d][16]).
// Null keys are skipped.
template <int S>
DSV4_AVX512 void dot_slots(const float* qt, __mmask16 lanes, const float* const* keys, int64_t j0, int64_t dim,
                           float scale, float* dots, int64_t key_stride, int64_t head_stride) {
  const float* k[S];
  for (int s = 0; s < S; ++s) k[s] = keys[j0 + s];
  __m512 acc[S];
  for (int s = 0; s < S; ++s) acc[s] = _mm512_setzero_ps();
  for (int64_t d = 0; d < dim; ++d) {
    const __m512 qd = _mm512_loadu_ps(qt + d * kPanel);
    for (int s = 0; s < S; ++s)
      if (k[s]) acc[s] = _mm512_add_ps(acc[s], _mm512_mul_ps(qd, _mm512_set1_ps(k[s][d])));
  }
  alignas(64) float lane[kPanel];
  for (int s = 0; s < S; ++s) {
    if (!k[s]) continue;
    _mm512_store_ps(lane, scale == 1.0f ? acc[s] : _mm512_mul_ps(acc[s], _mm512_set1_ps(scale)));
    for (int h = 0; h < kPanel; ++h)
      if (lanes >> h & 1) dots[(j0 + s) * key_stride + h * head_stride] = lane[h];
  }
}

// Up to 16 heads: every key's dot products with every head.
DSV4_AVX512 void group_dots(const float* q, int64_t heads, const float* const* keys, int64_t num_keys, int64_t dim,
                            float scale, float* qt, float* dots, int64_t key_stride, int64_t head_stride) {
  const __mmask16 lanes = static_cast<__mmask16>((1u << heads) - 1);
  for (int64_t d = 0; d < dim; ++d)
    for (int64_t h = 0; h < kPanel; ++h) qt[d * kPanel + h] = h < heads ? q[h * dim + d] : 0.0f;
  int64_t j = 0;
  for (; j + kSlotsAtOnce <= num_keys; j += kSlotsAtOnce)
    dot_slots<kSlotsAtOnce>(qt, lanes, keys, j, dim, scale, dots, key_stride, head_stride);
  for (; j < num_keys; ++j) dot_slots<1>(qt, lanes, keys, j, dim, scale, dots, key_stride, head_stride);
}

}  // namespace

void sink_attention_heads_avx512(const float* q, int64_t heads, const float* const* keys, int64_t num_slots,
                                 int64_t dim, const float* sinks, float scale, float* scratch, float* out) {
  float* scores = scratch;                   // [heads][num_slots]
  float* qt = scratch + heads * num_slots;   // [dim][16]
  group_dots(q, heads, keys, num_slots, dim, scale, qt, scores, 1, num_slots);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < num_slots; ++j)
      if (!keys[j]) scores[h * num_slots + j] = -__builtin_inff();

  for (int64_t h = 0; h < heads; ++h) {
    float* sh = scores + h * num_slots;
    const float denom = sink_softmax(keys, num_slots, sinks[h], sh);
    // 256 dimensions (16 vectors) per pass keep the sums in registers.
    for (int64_t d0 = 0; d0 < dim; d0 += 256) {
      const int64_t vectors = std::min<int64_t>(16, (dim - d0) / kPanel);
      __m512 acc[16];
      for (int v = 0; v < 16; ++v) acc[v] = _mm512_setzero_ps();
      for (int64_t s = 0; s < num_slots; ++s) {
        if (!keys[s]) continue;
        const __m512 p = _mm512_set1_ps(sh[s] / denom);
        const float* k = keys[s] + d0;
        for (int v = 0; v < vectors; ++v)
          acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(p, _mm512_loadu_ps(k + v * kPanel)));
      }
      for (int v = 0; v < vectors; ++v) _mm512_storeu_ps(out + h * dim + d0 + v * kPanel, acc[v]);
    }
  }
}

void head_dots_avx512(const float* q, int64_t heads, const float* const* keys, int64_t num_keys, int64_t dim,
                      float* scratch, float* dots) {
  for (int64_t h0 = 0; h0 < heads; h0 += kPanel)
    group_dots(q + h0 * dim, std::min<int64_t>(kPanel, heads - h0), keys, num_keys, dim, 1.0f, scratch, dots + h0,
               heads, 1);
}

}  // namespace dsv4::kernels
