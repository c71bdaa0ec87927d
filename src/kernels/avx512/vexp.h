// The generic vexp (SLEEF's 1-ULP expf, kernels/generic/elementary.cc) on
// 16 lanes: the same operations in the same order, each FMA a single
// rounding in both, so every lane is bit-identical to the scalar function.
// For the AVX-512 translation units only (internal linkage).
#pragma once

#include <immintrin.h>

namespace dsv4::kernels::avx512 {
namespace {

inline __m512 pow2i16(__m512i q) {  // 2^q, q in the normal range
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(q, _mm512_set1_epi32(0x7f)), 23));
}

inline __m512 vexp16(__m512 d) {
  const __m512 log2e = _mm512_set1_ps(1.442695040888963407359924681001892137426645954152985934135449406931f);
  // Round to nearest even (the default rounding mode), as nearbyint.
  const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(d, log2e));
  const __m512 qf = _mm512_cvtepi32_ps(q);
  __m512 s = _mm512_fmadd_ps(qf, _mm512_set1_ps(-0.693145751953125f), d);
  s = _mm512_fmadd_ps(qf, _mm512_set1_ps(-1.428606765330187045e-06f), s);
  __m512 u = _mm512_set1_ps(0.000198527617612853646278381f);
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.00139304355252534151077271f));
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.00833336077630519866943359f));
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.0416664853692054748535156f));
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.166666671633720397949219f));
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.5f));
  u = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_mul_ps(s, s), u, s));
  // u * 2^(q >> 1) * 2^(q - (q >> 1)): q may pass one exponent range.
  const __m512i half = _mm512_srai_epi32(q, 1);
  __m512 r = _mm512_mul_ps(_mm512_mul_ps(u, pow2i16(half)), pow2i16(_mm512_sub_epi32(q, half)));
  r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(d, _mm512_set1_ps(-104.0f), _CMP_LT_OQ), r, _mm512_setzero_ps());
  r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(d, _mm512_set1_ps(100.0f), _CMP_GT_OQ), r,
                           _mm512_set1_ps(__builtin_inff()));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q), r, d);
}

}  // namespace
}  // namespace dsv4::kernels::avx512
