// Elementwise kernels on AVX-512 that keep the generic kernels' exact
// results: the Walsh-Hadamard product with 16 outputs per vector (each
// still adds +-x[l] left to right), and the FP8 e4m3 rounding of
// activations and of KV rows stored as codes (done by adding and
// subtracting a constant whose last mantissa bit is the format's quantum:
// ties to even, as nearbyint).
#include <immintrin.h>

#include "base/dtype.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/vexp.h"
#include "kernels/generic/generic_kernels.h"

namespace dsv4::kernels::avx512 {

// silu_at on 16 lanes where the reference's loop took the vector path
// (simd_element), the generic function elsewhere.
void silu(float* x, int64_t n, int64_t index0, int64_t total) {
  const int64_t vector_end = total / 16 * 16 - index0;  // elements before it took the vector path
  int64_t i = 0;
  for (; i + 16 <= n && i + 16 <= vector_end; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 e = vexp16(_mm512_sub_ps(_mm512_setzero_ps(), v));
    _mm512_storeu_ps(x + i, _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
  }
  generic::silu(x + i, n - i, index0 + i, total);
}

void hadamard(float* x, int64_t n, float* scratch) {
  if (n % 16) return generic::hadamard(x, n, scratch);
  // Lane c of output block i0 negates x[l] when popcount(l & (i0 + c)) is
  // odd: the parity of l & i0 (all lanes) xor the parity of l & c.
  __mmask16 low[16];
  for (int b = 0; b < 16; ++b) {
    low[b] = 0;
    for (int c = 0; c < 16; ++c) low[b] |= static_cast<__mmask16>((__builtin_popcount(b & c) & 1) << c);
  }
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  for (int64_t i0 = 0; i0 < n; i0 += 16) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t l = 0; l < n; ++l) {
      const __mmask16 odd = low[l & 15] ^ ((__builtin_popcountll(l & i0) & 1) ? 0xFFFF : 0);
      const __m512i xl = _mm512_castps_si512(_mm512_set1_ps(x[l]));
      acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_mask_xor_epi32(xl, odd, xl, sign)));
    }
    _mm512_storeu_ps(scratch + i0, acc);
  }
  const __m512 s = _mm512_set1_ps(static_cast<float>(__builtin_pow(static_cast<double>(n), -0.5)));
  for (int64_t i = 0; i < n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(scratch + i), s));
}

namespace {

// x / scale (exact as x * (1 / scale): a power of two), clamped to +-448 and
// rounded to e4m3: 1.5 * 2^(e + 20) has quantum 2^(e - 3), e4m3's spacing in
// [2^e, 2^(e+1)), so adding and subtracting it rounds (ties to even).
inline __m512 round_to_e4m3_lanes(__m512 x, __m512 inverse) {
  const __m512 max_value = _mm512_set1_ps(kE4M3Max), min_exponent = _mm512_set1_ps(-6.0f);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  __m512 q = _mm512_mul_ps(x, inverse);
  q = _mm512_min_ps(max_value, _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), max_value), q));
  const __m512 e = _mm512_max_ps(_mm512_getexp_ps(q), min_exponent);
  const __m512 c = _mm512_scalef_ps(_mm512_set1_ps(1.5f), _mm512_add_ps(e, _mm512_set1_ps(20.0f)));
  const __m512 r = _mm512_sub_ps(_mm512_add_ps(q, c), c);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r),
                                             _mm512_and_si512(_mm512_castps_si512(q), sign)));  // -0 stays -0
}

// The block's scale from the amax of `block` values (a multiple of 16).
inline float block_scale_of(const float* x, int64_t block) {
  __m512 amax = _mm512_setzero_ps();
  for (int64_t i = 0; i < block; i += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  return fp8_block_scale(_mm512_reduce_max_ps(amax));
}

}  // namespace

void fp8_round_trip(float* x, int64_t n, int64_t block) {
  if (block % 16) return fp8_quant_dequant(x, n, block);
  for (int64_t b = 0; b < n; b += block) {
    const float scale = block_scale_of(x + b, block);
    const __m512 vscale = _mm512_set1_ps(scale), inverse = _mm512_set1_ps(1.0f / scale);
    for (int64_t i = b; i < b + block; i += 16)
      _mm512_storeu_ps(x + i, _mm512_mul_ps(round_to_e4m3_lanes(_mm512_loadu_ps(x + i), inverse), vscale));
  }
}

// The rounded values' codes: |r| * 2^-120 holds the code's exponent and
// mantissa bits at bit 20 (see f32_to_e4m3), the sign goes to bit 7.
void store_kv_row(const float* x, const KvRowFormat& f, uint8_t* row) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  for (int64_t b = 0; b < f.nope; b += kKvScaleBlock) {
    const float scale = block_scale_of(x + b, kKvScaleBlock);
    const __m512 inverse = _mm512_set1_ps(1.0f / scale);
    for (int64_t i = b; i < b + kKvScaleBlock; i += 16) {
      const __m512i r = _mm512_castps_si512(round_to_e4m3_lanes(_mm512_loadu_ps(x + i), inverse));
      const __m512i magnitude = _mm512_castps_si512(
          _mm512_mul_ps(_mm512_castsi512_ps(_mm512_andnot_si512(sign, r)), _mm512_set1_ps(0x1p-120f)));
      const __m512i code = _mm512_or_si512(_mm512_srli_epi32(magnitude, 20), _mm512_srli_epi32(_mm512_and_si512(r, sign), 24));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(row + i), _mm512_cvtepi32_epi8(code));
    }
    row[f.scale_offset() + b / kKvScaleBlock] = static_cast<uint8_t>(__builtin_bit_cast(uint32_t, scale) >> 23);
  }
  __builtin_memcpy(row + f.rope_offset(), x + f.nope, sizeof(float) * f.rope);
}

}  // namespace dsv4::kernels::avx512
