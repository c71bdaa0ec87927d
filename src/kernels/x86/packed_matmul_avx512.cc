// The packed-panel GEMM on AVX-512: 16 output columns per vector, blocks of
// up to 4 rows x 4 panels in registers, k in slices that stay in cache
// (partial sums park in y between slices, so every output still adds its
// products left to right: multiply, round, add, round; no FMA). FP8 and FP4
// panels are decoded in registers: a code's value is exact in f32 and its
// power-of-two scale is applied by one exact scalef, as the reference's
// dequantization multiplies.
#include <immintrin.h>

#include <algorithm>

#include "kernels/kernels.h"

#define DSV4_AVX512 __attribute__((target("avx512f,avx512bw")))

namespace dsv4::kernels {
namespace {

constexpr int64_t kSlice = 256;  // k per slice

// Where a panel's 16 weights at step t come from.
struct F32Source {
  const float* packed;
  int64_t k;
  DSV4_AVX512 __m512 load(int64_t p, int64_t t) const { return _mm512_loadu_ps(packed + (p * k + t) * kPanel); }
};

// The e8m0 scales of panel p at step t as exponents (scale = 2^e).
DSV4_AVX512 inline __m512 scale_exponents(const uint8_t* scales, int64_t blocks, int64_t block, int64_t p,
                                          int64_t t) {
  const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + (p * blocks + t / block) * kPanel));
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(s), _mm512_set1_epi32(127)));
}

struct Bf16Source {
  const uint8_t* codes;
  int64_t k;
  DSV4_AVX512 __m512 load(int64_t p, int64_t t) const {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + (p * k + t) * kPanel * 2));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
};

struct Fp8Source {
  const uint8_t* codes;
  const uint8_t* scales;
  int64_t k, blocks;
  DSV4_AVX512 __m512 load(int64_t p, int64_t t) const {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + (p * k + t) * kPanel));
    const __m512i v = _mm512_cvtepu8_epi32(b);
    // e4m3 -> f32: sign to bit 31, exponent and mantissa to bits 30..20
    // (a float 2^-120 times the value, subnormals included), then 2^120.
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24);
    const __m512i mag = _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x7F)), 20);
    const __m512 value = _mm512_scalef_ps(_mm512_castsi512_ps(_mm512_or_si512(sign, mag)), _mm512_set1_ps(120.0f));
    return _mm512_scalef_ps(value, scale_exponents(scales, blocks, 128, p, t));
  }
};

struct Fp4Source {
  const uint8_t* codes;
  const uint8_t* scales;
  int64_t k, blocks;
  DSV4_AVX512 __m512 load(int64_t p, int64_t t) const {
    const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                                        -2.0f, -3.0f, -4.0f, -6.0f);
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + (p * k + t) * (kPanel / 2)));
    // Byte c / 2 to lane c, then the low nibble for even c, the high for odd.
    const __m128i twice = _mm_shuffle_epi8(b, _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
    const __m512i shift = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    const __m512i nibble =
        _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(twice), shift), _mm512_set1_epi32(0xF));
    return _mm512_scalef_ps(_mm512_permutexvar_ps(nibble, table), scale_exponents(scales, blocks, 32, p, t));
  }
};

// Rows [i, i + R) x panels [p, p + P), k range [t0, t1); first: start from 0.
template <int R, int P, class Source>
DSV4_AVX512 void block(const float* x, int64_t k, const Source& src, int64_t n, int64_t i, int64_t p, int64_t t0,
                       int64_t t1, bool first, float* y, int64_t ldy) {
  __m512 acc[R][P];
  __mmask16 mask[P];
  for (int pp = 0; pp < P; ++pp) {
    const int64_t cols = std::min(kPanel, n - (p + pp) * kPanel);
    mask[pp] = static_cast<__mmask16>((1u << cols) - 1);
    for (int r = 0; r < R; ++r)
      acc[r][pp] = first ? _mm512_setzero_ps()
                         : _mm512_maskz_loadu_ps(mask[pp], y + (i + r) * ldy + (p + pp) * kPanel);
  }
  for (int64_t t = t0; t < t1; ++t) {
    __m512 w[P];
    for (int pp = 0; pp < P; ++pp) w[pp] = src.load(p + pp, t);
    for (int r = 0; r < R; ++r) {
      const __m512 xb = _mm512_set1_ps(x[(i + r) * k + t]);
      for (int pp = 0; pp < P; ++pp) acc[r][pp] = _mm512_add_ps(acc[r][pp], _mm512_mul_ps(xb, w[pp]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int pp = 0; pp < P; ++pp) _mm512_mask_storeu_ps(y + (i + r) * ldy + (p + pp) * kPanel, mask[pp], acc[r][pp]);
}

template <class Source>
using BlockFn = void (*)(const float*, int64_t, const Source&, int64_t, int64_t, int64_t, int64_t, int64_t, bool,
                         float*, int64_t);

template <int R, class Source>
BlockFn<Source> pick(int64_t panels) {
  switch (panels) {
    case 1: return &block<R, 1, Source>;
    case 2: return &block<R, 2, Source>;
    case 3: return &block<R, 3, Source>;
    default: return &block<R, 4, Source>;
  }
}

template <class Source>
BlockFn<Source> pick(int64_t rows, int64_t panels) {
  switch (rows) {
    case 1: return pick<1, Source>(panels);
    case 2: return pick<2, Source>(panels);
    case 3: return pick<3, Source>(panels);
    default: return pick<4, Source>(panels);
  }
}

template <class Source>
void run(const float* x, int64_t m, int64_t k, const Source& src, int64_t n, int64_t p_begin, int64_t p_end, float* y,
         int64_t ldy) {
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      std::fill(y + i * ldy + p_begin * kPanel, y + i * ldy + std::min(n, p_end * kPanel), 0.0f);
    return;
  }
  for (int64_t t0 = 0; t0 < k; t0 += kSlice) {
    const int64_t t1 = std::min(k, t0 + kSlice);
    for (int64_t p = p_begin; p < p_end; p += 4) {
      const int64_t np = std::min<int64_t>(4, p_end - p);
      for (int64_t i = 0; i < m; i += 4) {
        const int64_t nr = std::min<int64_t>(4, m - i);
        pick<Source>(nr, np)(x, k, src, n, i, p, t0, t1, t0 == 0, y, ldy);
      }
    }
  }
}

}  // namespace

void matmul_packed_avx512(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, int64_t p_begin,
                          int64_t p_end, float* y, int64_t ldy) {
  run(x, m, k, F32Source{packed, k}, n, p_begin, p_end, y, ldy);
}

void matmul_quantized_avx512(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n,
                             int64_t p_begin, int64_t p_end, float* y, int64_t ldy) {
  if (w.format == PanelFormat::kBf16) {
    run(x, m, k, Bf16Source{w.codes, k}, n, p_begin, p_end, y, ldy);
    return;
  }
  const int64_t blocks = (k + panel_block(w.format) - 1) / panel_block(w.format);
  if (w.format == PanelFormat::kFp8) run(x, m, k, Fp8Source{w.codes, w.scales, k, blocks}, n, p_begin, p_end, y, ldy);
  else run(x, m, k, Fp4Source{w.codes, w.scales, k, blocks}, n, p_begin, p_end, y, ldy);
}

}  // namespace dsv4::kernels
