// FP8 e4m3 and FP4 e2m1 panel chunks (kernels.h: 64 bytes of codes, 4 or
// 8 input steps of 16 columns) decoded to BF16 pair vectors on AVX-512, by
// table lookups (VBMI's 128-entry byte permute and one byte interleave for
// e4m3, a word permute per nibble for e2m1); optionally with the e8m0 scale
// added to the BF16 exponent of every nonzero weight (a code times a power
// of two: exact). For the AVX-512 translation units only (internal linkage).
#pragma once

#include <immintrin.h>

#include "base/dtype.h"
#include "kernels/isa_local.h"
#include "kernels/kernels.h"

namespace dsv4::kernels::avx512 {
namespace {

// The BF16 bits of every e4m3 magnitude, as high and low bytes, and of
// every e2m1 code as words (twice over: 32 entries for the word permute).
struct ByteTables {
  alignas(64) uint8_t fp8_high[128], fp8_low[128];
  alignas(64) uint16_t fp4_words[32];
  ByteTables() {
    for (int i = 0; i < 128; ++i) {
      const uint16_t b = f32_to_bf16(e4m3_to_f32(static_cast<uint8_t>(i)));
      fp8_high[i] = static_cast<uint8_t>(b >> 8);
      fp8_low[i] = static_cast<uint8_t>(b & 0xFF);
    }
    for (int i = 0; i < 32; ++i) fp4_words[i] = f32_to_bf16(e2m1_to_f32(static_cast<uint8_t>(i % 16)));
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

// Block: the inputs per scale (128: PanelFormat::kFp8, 32: kFp8Block32).
template <int64_t Block>
struct Fp8ChunksOf {
  static constexpr int kGroups = 2;
  static constexpr int64_t kSteps = 4, kBlock = Block;
  __m512i high_a, high_b, low_a, low_b;  // BF16 bytes of magnitudes 0..63 and 64..127
  explicit Fp8ChunksOf(const ByteTables& t)
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

using Fp8Chunks = Fp8ChunksOf<128>;
using Fp8Block32Chunks = Fp8ChunksOf<32>;

struct Fp4Chunks {
  static constexpr int kGroups = 4;
  static constexpr int64_t kSteps = 8, kBlock = 32;
  __m512i words;  // the BF16 bits of code i % 16 in word i
  explicit Fp4Chunks(const ByteTables& t) : words(_mm512_load_si512(t.fp4_words)) {}
  // Group g is nibble g of every word (code_position): the word permute
  // reads index bits 0..4, and the table repeats after 16 entries, so the
  // next nibble's low bit does not matter.
  void decode(const uint8_t* chunk, __m512i* groups) const {
    const __m512i codes = _mm512_loadu_si512(chunk);
    groups[0] = _mm512_permutexvar_epi16(codes, words);
    groups[1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(codes, 4), words);
    groups[2] = _mm512_permutexvar_epi16(_mm512_srli_epi16(codes, 8), words);
    groups[3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(codes, 12), words);
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

// Panels [p, p + np) over steps [t0, t1) decoded once into BF16 pair
// vectors: out[pp * (t1 - t0) / 2 + pair], for every row block to reuse;
// Scaled: times their e8m0 scales, else the bare codes. Each chunk read
// asks L2 for the same chunk of the next 4 panels, which the callers
// (panel groups outer, slices inner) decode once this group's slices are
// done: a group ahead, so memory streams into L2 while this group computes
// (without it a quarter of an FP4 expert GEMM's time at prefill waited on
// this load; asking for the next slice of these panels instead was 10%
// slower at 16 rows with weights from memory; a prefetch never faults past
// the panels' end).
template <class Chunks, bool Scaled>
void decode_slice(const QuantizedPanels& w, int64_t k, int64_t p, int64_t np, int64_t t0, int64_t t1, __m512i* out) {
  const Chunks chunks(tables());
  const int64_t blocks = (k + Chunks::kBlock - 1) / Chunks::kBlock, pairs = (t1 - t0) / 2;
  for (int64_t pp = 0; pp < np; ++pp) {
    __m512i steps = _mm512_setzero_si512();
    for (int64_t t = t0; t < t1; t += Chunks::kSteps) {
      if (t == t0 || t % Chunks::kBlock == 0)
        steps = exponent_steps(w.scales + ((p + pp) * blocks + t / Chunks::kBlock) * kPanel);
      __m512i g[Chunks::kGroups];
      const uint8_t* chunk = w.codes + ((p + pp) * k + t) / Chunks::kSteps * kChunkBytes;
      _mm_prefetch(reinterpret_cast<const char*>(chunk + 4 * k / Chunks::kSteps * kChunkBytes), _MM_HINT_T1);
      chunks.decode(chunk, g);
      for (int G = 0; G < Chunks::kGroups; ++G) out[pp * pairs + (t - t0) / 2 + G] = Scaled ? scaled(g[G], steps) : g[G];
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels::avx512
