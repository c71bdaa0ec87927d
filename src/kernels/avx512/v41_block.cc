// DeepSeek-V4.1's linear, one K block for 16 output rows: the generic
// body's loops with a lane per output row. Each lane multiplies, then adds,
// in input order (no FMA: the build turns contraction off), so the bits are
// the generic body's; four input rows run side by side so the adds of one
// row do not wait on each other.
#include <immintrin.h>

#include "kernels/avx512/avx512_kernels.h"

namespace dsv4::kernels::avx512 {

static_assert(kPanel == 16, "one zmm lane per output row");

namespace {

constexpr int kRowsAtOnce = 4;

// Rows [r0, r0 + R) of the block.
template <int R>
void rows_block(const float* a, int64_t lda, int64_t r0, const float* tile, int64_t n, const float* sx,
                const float* wscale, float* acc) {
  __m512 sum[R];
  for (int q = 0; q < R; ++q) sum[q] = wscale ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + (r0 + q) * kPanel);
  for (int64_t i = 0; i < n; ++i) {
    const __m512 w = _mm512_loadu_ps(tile + i * kPanel);
    for (int q = 0; q < R; ++q)
      sum[q] = _mm512_add_ps(sum[q], _mm512_mul_ps(_mm512_set1_ps(a[(r0 + q) * lda + i]), w));
  }
  for (int q = 0; q < R; ++q) {
    float* out = acc + (r0 + q) * kPanel;
    if (wscale) {
      const __m512 t = _mm512_mul_ps(_mm512_mul_ps(sum[q], _mm512_set1_ps(sx[r0 + q])), _mm512_loadu_ps(wscale));
      _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), t));
    } else {
      _mm512_storeu_ps(out, sum[q]);
    }
  }
}

}  // namespace

void v41_block(const float* a, int64_t lda, int64_t m, const float* tile, int64_t n, const float* sx,
               const float* wscale, float* acc) {
  int64_t r = 0;
  for (; r + kRowsAtOnce <= m; r += kRowsAtOnce) rows_block<kRowsAtOnce>(a, lda, r, tile, n, sx, wscale, acc);
  for (; r < m; ++r) rows_block<1>(a, lda, r, tile, n, sx, wscale, acc);
}

}  // namespace dsv4::kernels::avx512
