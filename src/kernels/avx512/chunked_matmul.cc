// FP8 and FP4 panels on AVX-512: each 64-byte chunk of codes becomes BF16
// pair vectors by byte-table lookups (VBMI's 128-entry permute for e4m3,
// a 16-entry shuffle for e2m1 nibbles) and one byte interleave; the e8m0
// scale is added to the BF16 exponent of every nonzero weight (exact: a
// code times a power of two). Then either
//  - BF16 inputs (matmul_quantized_pairs): one VDPBF16PS per pair vector,
//    which adds the high step's exact product and then the low step's, the
//    reference's left-to-right order; or
//  - f32 inputs: each pair vector splits into the two steps' f32 weights and
//    every product is rounded and added in turn.
// Blocks of up to 4 rows x 4 panels, k in 256-step slices (partial sums park
// in y), as the f32 panels.
#include <immintrin.h>

#include "base/dtype.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/register_blocks.h"
#include "kernels/isa_local.h"

namespace dsv4::kernels::avx512 {
namespace {

// The BF16 bits of every e4m3 magnitude and e2m1 code, as high and low
// bytes (the FP4 ones repeated in each 128-bit lane for the byte shuffle).
struct ByteTables {
  alignas(64) uint8_t fp8_high[128], fp8_low[128], fp4_high[64], fp4_low[64];
  ByteTables() {
    for (int i = 0; i < 128; ++i) {
      const uint16_t b = f32_to_bf16(e4m3_to_f32(static_cast<uint8_t>(i)));
      fp8_high[i] = static_cast<uint8_t>(b >> 8);
      fp8_low[i] = static_cast<uint8_t>(b & 0xFF);
    }
    for (int i = 0; i < 64; ++i) {
      const uint16_t b = f32_to_bf16(e2m1_to_f32(static_cast<uint8_t>(i % 16)));
      fp4_high[i] = static_cast<uint8_t>(b >> 8);
      fp4_low[i] = static_cast<uint8_t>(b & 0xFF);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

struct Fp8Chunks {
  static constexpr int kGroups = 2;
  static constexpr int64_t kSteps = 4, kBlock = 128;
  __m512i high_a, high_b, low_a, low_b;  // BF16 bytes of magnitudes 0..63 and 64..127
  explicit Fp8Chunks(const ByteTables& t)
      : high_a(_mm512_load_si512(t.fp8_high)),
        high_b(_mm512_load_si512(t.fp8_high + 64)),
        low_a(_mm512_load_si512(t.fp8_low)),
        low_b(_mm512_load_si512(t.fp8_low + 64)) {}
  void decode(const uint8_t* chunk, __m512i* groups) const {
    const __m512i codes = _mm512_loadu_si512(chunk);
    // The permute reads index bits 0..6 (the magnitude); the sign bit is
    // then copied into the high byte.
    __m512i high = _mm512_permutex2var_epi8(high_a, codes, high_b);
    const __m512i low = _mm512_permutex2var_epi8(low_a, codes, low_b);
    high = _mm512_ternarylogic_epi32(high, codes, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);  // a | (b & c)
    groups[0] = _mm512_unpacklo_epi8(low, high);
    groups[1] = _mm512_unpackhi_epi8(low, high);
  }
};

struct Fp4Chunks {
  static constexpr int kGroups = 4;
  static constexpr int64_t kSteps = 8, kBlock = 32;
  __m512i high, low;  // BF16 bytes of the 16 codes, in every 128-bit lane
  explicit Fp4Chunks(const ByteTables& t)
      : high(_mm512_load_si512(t.fp4_high)), low(_mm512_load_si512(t.fp4_low)) {}
  void decode(const uint8_t* chunk, __m512i* groups) const {
    const __m512i codes = _mm512_loadu_si512(chunk), nibble = _mm512_set1_epi8(0x0F);
    const __m512i lo = _mm512_and_si512(codes, nibble), hi = _mm512_and_si512(_mm512_srli_epi16(codes, 4), nibble);
    const __m512i lo_h = _mm512_shuffle_epi8(high, lo), lo_l = _mm512_shuffle_epi8(low, lo);
    const __m512i hi_h = _mm512_shuffle_epi8(high, hi), hi_l = _mm512_shuffle_epi8(low, hi);
    groups[0] = _mm512_unpacklo_epi8(lo_l, lo_h);
    groups[1] = _mm512_unpackhi_epi8(lo_l, lo_h);
    groups[2] = _mm512_unpacklo_epi8(hi_l, hi_h);
    groups[3] = _mm512_unpackhi_epi8(hi_l, hi_h);
  }
};

// The 16 e8m0 scales as BF16 exponent increments, in both words of a lane.
inline __m512i exponent_steps(const uint8_t* scales) {
  const __m512i e = _mm512_slli_epi32(
      _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales))),
                       _mm512_set1_epi32(127)),
      7);
  return _mm512_or_si512(_mm512_and_si512(e, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(e, 16));
}

// Nonzero weights times 2^scale (zeros stay signed zeros).
inline __m512i scaled(__m512i weights, __m512i steps) {
  const __mmask32 nonzero = _mm512_test_epi16_mask(weights, _mm512_set1_epi16(0x7FFF));
  return _mm512_mask_add_epi16(weights, nonzero, weights, steps);
}

// How far ahead each panel's code stream is prefetched in decode (the
// hardware prefetcher alone left the FP8 GEMVs about a quarter short; the
// BF16 and f32 panels, read twice as fast per byte, do better without).
constexpr int kPrefetchBytes = 1024;

struct Inputs {
  const float* x;         // f32 rows, or
  const uint32_t* pairs;  // BF16 pair rows
};

// Panel pp's pair vector (steps t, t + 1) times f32 inputs: split into the
// two steps' weights, each product rounded and added in turn.
template <int R, int P>
inline void add_pair_f32(__m512 (&acc)[R][P], int pp, __m512i pair, const float* x, int64_t k,
                                          int64_t i, int64_t t) {
  const __m512 first = _mm512_castsi512_ps(_mm512_and_si512(pair, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  const __m512 second = _mm512_castsi512_ps(_mm512_slli_epi32(pair, 16));
  for (int r = 0; r < R; ++r) {
    const float* xr = x + (i + r) * k + t;
    acc[r][pp] = _mm512_add_ps(acc[r][pp], _mm512_mul_ps(_mm512_set1_ps(xr[0]), first));
    acc[r][pp] = _mm512_add_ps(acc[r][pp], _mm512_mul_ps(_mm512_set1_ps(xr[1]), second));
  }
}

// Rows [i, i + R) x panels [p, p + P), steps [t0, t1); first: start from 0.
template <int R, int P, class Chunks, bool kPairs>
void chunk_block(const Inputs& in, int64_t k, const QuantizedPanels& w, int64_t n, int64_t i,
                                  int64_t p, int64_t t0, int64_t t1, bool first, float* y, int64_t ldy) {
  const Chunks chunks(tables());
  const int64_t blocks = (k + Chunks::kBlock - 1) / Chunks::kBlock;
  __m512 acc[R][P];
  __mmask16 mask[P];
  start_block<R, P>(acc, mask, n, i, p, first, y, ldy);
  __m512i steps[P] = {};
  for (int64_t t = t0; t < t1; t += Chunks::kSteps) {
    if (t % Chunks::kBlock == 0)
      for (int pp = 0; pp < P; ++pp) steps[pp] = exponent_steps(w.scales + ((p + pp) * blocks + t / Chunks::kBlock) * kPanel);
    for (int pp = 0; pp < P; ++pp) {
      __m512i g[Chunks::kGroups];
      const uint8_t* chunk = w.codes + ((p + pp) * k + t) / Chunks::kSteps * kChunkBytes;
      _mm_prefetch(reinterpret_cast<const char*>(chunk) + kPrefetchBytes, _MM_HINT_T0);
      chunks.decode(chunk, g);
      for (int G = 0; G < Chunks::kGroups; ++G) {
        const __m512i wg = scaled(g[G], steps[pp]);
        if constexpr (kPairs) {
          for (int r = 0; r < R; ++r) {
            const __m512i xb = _mm512_set1_epi32(static_cast<int>(in.pairs[((i + r) * k + t) / 2 + G]));
            acc[r][pp] = _mm512_dpbf16_ps(acc[r][pp], reinterpret_cast<__m512bh>(wg), reinterpret_cast<__m512bh>(xb));
          }
        } else {
          add_pair_f32<R, P>(acc, pp, wg, in.x, k, i, t + 2 * G);
        }
      }
    }
  }
  finish_block<R, P>(acc, mask, i, p, y, ldy);
}

// Panels [p, p + np) over steps [t0, t1) decoded once into BF16 pair
// vectors: out[pp * (t1 - t0) / 2 + pair], for every row block to reuse.
template <class Chunks>
void decode_slice(const QuantizedPanels& w, int64_t k, int64_t p, int64_t np, int64_t t0, int64_t t1,
                                   __m512i* out) {
  const Chunks chunks(tables());
  const int64_t blocks = (k + Chunks::kBlock - 1) / Chunks::kBlock, pairs = (t1 - t0) / 2;
  for (int64_t pp = 0; pp < np; ++pp) {
    __m512i steps = _mm512_setzero_si512();
    for (int64_t t = t0; t < t1; t += Chunks::kSteps) {
      if (t == t0 || t % Chunks::kBlock == 0)
        steps = exponent_steps(w.scales + ((p + pp) * blocks + t / Chunks::kBlock) * kPanel);
      __m512i g[Chunks::kGroups];
      chunks.decode(w.codes + ((p + pp) * k + t) / Chunks::kSteps * kChunkBytes, g);
      for (int G = 0; G < Chunks::kGroups; ++G) out[pp * pairs + (t - t0) / 2 + G] = scaled(g[G], steps);
    }
  }
}

// Rows [i, i + R) x panels [p, p + P) over a decoded slice.
template <int R, int P, bool kPairs>
void decoded_block(const Inputs& in, int64_t k, const __m512i* decoded, int64_t n, int64_t i,
                                    int64_t p, int64_t t0, int64_t t1, bool first, float* y, int64_t ldy) {
  const int64_t pairs = (t1 - t0) / 2;
  __m512 acc[R][P];
  __mmask16 mask[P];
  start_block<R, P>(acc, mask, n, i, p, first, y, ldy);
  for (int64_t q = 0; q < pairs; ++q) {
    __m512i wg[P];
    for (int pp = 0; pp < P; ++pp) wg[pp] = _mm512_load_si512(decoded + pp * pairs + q);
    if constexpr (kPairs) {
      for (int r = 0; r < R; ++r) {
        const __m512i xb = _mm512_set1_epi32(static_cast<int>(in.pairs[((i + r) * k + t0) / 2 + q]));
        for (int pp = 0; pp < P; ++pp)
          acc[r][pp] = _mm512_dpbf16_ps(acc[r][pp], reinterpret_cast<__m512bh>(wg[pp]), reinterpret_cast<__m512bh>(xb));
      }
    } else {
      for (int pp = 0; pp < P; ++pp) {
        add_pair_f32<R, P>(acc, pp, wg[pp], in.x, k, i, t0 + 2 * q);
      }
    }
  }
  finish_block<R, P>(acc, mask, i, p, y, ldy);
}

template <class Chunks, bool kPairs>
void run(const Inputs& in, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin, int64_t p_end,
         float* y, int64_t ldy) {
  if (k == 0) return zero_outputs(m, n, kPanel, p_begin, p_end, y, ldy);
  const int64_t slice = slice_steps(m, k);
  if (m == 0) return;  // an idle data-parallel group
  if (m <= 4) {  // one row block: decode while multiplying
    for (int64_t t0 = 0; t0 < k; t0 += slice) {
      const int64_t t1 = lesser(k, t0 + slice);
      for (int64_t p = p_begin; p < p_end; p += 4)
        with_block(m, p_end - p, [&]<int R, int P>() {
          chunk_block<R, P, Chunks, kPairs>(in, k, w, n, 0, p, t0, t1, t0 == 0, y, ldy);
        });
    }
    return;
  }
  // Several row blocks: each slice of 4 panels is decoded once (32 KiB,
  // cache-resident) and every row block multiplies it.
  alignas(64) __m512i decoded[4 * 256 / 2];
  for (int64_t t0 = 0; t0 < k; t0 += slice) {
    const int64_t t1 = lesser(k, t0 + slice);
    for (int64_t p = p_begin; p < p_end; p += 4) {
      const int64_t np = lesser(4, p_end - p);
      decode_slice<Chunks>(w, k, p, np, t0, t1, decoded);
      for (int64_t i = 0; i < m; i += 4)
        with_block(m - i, np, [&]<int R, int P>() {
          decoded_block<R, P, kPairs>(in, k, decoded, n, i, p, t0, t1, t0 == 0, y, ldy);
        });
    }
  }
}

}  // namespace

void matmul_chunked(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                           int64_t p_end, float* y, int64_t ldy) {
  const Inputs in{x, nullptr};
  if (w.format == PanelFormat::kFp8) run<Fp8Chunks, false>(in, m, k, w, n, p_begin, p_end, y, ldy);
  else run<Fp4Chunks, false>(in, m, k, w, n, p_begin, p_end, y, ldy);
}

void matmul_quantized_pairs(const uint32_t* pairs, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n,
                                   int64_t p_begin, int64_t p_end, float* y, int64_t ldy) {
  const Inputs in{nullptr, pairs};
  if (w.format == PanelFormat::kFp8) run<Fp8Chunks, true>(in, m, k, w, n, p_begin, p_end, y, ldy);
  else run<Fp4Chunks, true>(in, m, k, w, n, p_begin, p_end, y, ldy);
}

}  // namespace dsv4::kernels::avx512
