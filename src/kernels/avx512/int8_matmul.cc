// W8A8 panels on AVX-512 VNNI: VPDPBUSD adds four uint8 x int8 products
// per lane into int32 (exact), 16 output channels per vector; blocks of up
// to 4 rows x 4 panels; the epilogue converts and scales as the generic
// kernel does.
#include <immintrin.h>

#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/register_blocks.h"
#include "kernels/isa_local.h"

namespace dsv4::kernels::avx512 {
namespace {

template <int R, int P>
void int8_block(const uint8_t* biased, const float* row_scales, int64_t kp, const Int8Panels& w, int64_t n,
                          int64_t i, int64_t p, float* y, int64_t ldy) {
  __m512i acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int pp = 0; pp < P; ++pp) acc[r][pp] = _mm512_setzero_si512();
  for (int64_t q = 0; q < kp / 4; ++q) {
    __m512i wv[P];
    for (int pp = 0; pp < P; ++pp) wv[pp] = _mm512_loadu_si512(w.codes + ((p + pp) * kp / 4 + q) * kPanel * 4);
    for (int r = 0; r < R; ++r) {
      int32_t quad;
      __builtin_memcpy(&quad, biased + (i + r) * kp + q * 4, 4);
      const __m512i xb = _mm512_set1_epi32(quad);
      for (int pp = 0; pp < P; ++pp) acc[r][pp] = _mm512_dpbusd_epi32(acc[r][pp], xb, wv[pp]);
    }
  }
  for (int pp = 0; pp < P; ++pp) {
    const uint8_t* extra = w.sums_and_scales + (p + pp) * kPanel * 8;
    const __m512i bias = _mm512_slli_epi32(_mm512_loadu_si512(extra), 7);  // 128 x column sum
    const __m512 scales = _mm512_loadu_ps(extra + kPanel * 4);
    const __mmask16 mask = panel_mask(n, p + pp);
    for (int r = 0; r < R; ++r) {
      const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][pp], bias));
      const __m512 out = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(row_scales[i + r])), scales);
      _mm512_mask_storeu_ps(y + (i + r) * ldy + (p + pp) * kPanel, mask, out);
    }
  }
}

}  // namespace

void matmul_int8(const uint8_t* biased, const float* row_scales, int64_t m, int64_t k, const Int8Panels& w, int64_t n,
                 int64_t p_begin, int64_t p_end, float* y, int64_t ldy) {
  const int64_t kp = int8_padded_k(k);
  for (int64_t p = p_begin; p < p_end; p += 4) {
    const int64_t np = lesser(4, p_end - p);
    for (int64_t i = 0; i < m; i += 4)
      with_block(m - i, np, [&]<int R, int P>() { int8_block<R, P>(biased, row_scales, kp, w, n, i, p, y, ldy); });
  }
}

void quantize_rows_int8(const float* x, int64_t m, int64_t k, uint8_t* biased, float* row_scales) {
  const int64_t kp = int8_padded_k(k);
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    __m512 amax = _mm512_setzero_ps();
    int64_t t = 0;
    for (; t + 16 <= k; t += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(xi + t)));
    float top = _mm512_reduce_max_ps(amax);
    for (; t < k; ++t) top = __builtin_fmaxf(top, __builtin_fabsf(xi[t]));
    const float scale = top > 0.0f ? top / 127.0f : 1.0f;
    row_scales[i] = scale;
    // The generic kernel's steps: x / scale, clamped to +-127, rounded to
    // nearest even, + 128.
    const __m512 vscale = _mm512_set1_ps(scale), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    uint8_t* out = biased + i * kp;
    for (t = 0; t + 16 <= k; t += 16) {
      const __m512 q = _mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_div_ps(_mm512_loadu_ps(xi + t), vscale)));
      const __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT)),
                                         _mm512_set1_epi32(128));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + t), _mm512_cvtepi32_epi8(v));
    }
    for (; t < kp; ++t) {
      const float q = t < k ? __builtin_nearbyintf(__builtin_fminf(127.0f, __builtin_fmaxf(-127.0f, xi[t] / scale))) : 0.0f;
      out[t] = static_cast<uint8_t>(static_cast<int>(q) + 128);
    }
  }
}

}  // namespace dsv4::kernels::avx512
