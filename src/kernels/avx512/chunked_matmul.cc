// FP8 and FP4 panels on AVX-512, exact numerics: each 64-byte chunk of
// codes becomes BF16 pair vectors times their scales (code_chunks.h). Then
// either
//  - BF16 inputs (matmul_quantized_pairs): one VDPBF16PS per pair vector,
//    which adds the high step's exact product and then the low step's, the
//    reference's left-to-right order; or
//  - f32 inputs: each pair vector splits into the two steps' f32 weights and
//    every product is rounded and added in turn.
// Blocks of up to 4 rows x 4 panels, k in 256-step slices (partial sums park
// in y), as the f32 panels.
#include <immintrin.h>

#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/code_chunks.h"
#include "kernels/avx512/register_blocks.h"
#include "kernels/isa_local.h"

namespace dsv4::kernels::avx512 {
namespace {

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
template <int R, int P, bool Fused>
inline void add_pair_f32(__m512 (&acc)[R][P], int pp, __m512i pair, const float* x, int64_t k,
                                          int64_t i, int64_t t) {
  const __m512 first = _mm512_castsi512_ps(_mm512_and_si512(pair, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  const __m512 second = _mm512_castsi512_ps(_mm512_slli_epi32(pair, 16));
  for (int r = 0; r < R; ++r) {
    const float* xr = x + (i + r) * k + t;
    if constexpr (Fused) {
      acc[r][pp] = _mm512_fmadd_ps(_mm512_set1_ps(xr[0]), first, acc[r][pp]);
      acc[r][pp] = _mm512_fmadd_ps(_mm512_set1_ps(xr[1]), second, acc[r][pp]);
    } else {
      acc[r][pp] = _mm512_add_ps(acc[r][pp], _mm512_mul_ps(_mm512_set1_ps(xr[0]), first));
      acc[r][pp] = _mm512_add_ps(acc[r][pp], _mm512_mul_ps(_mm512_set1_ps(xr[1]), second));
    }
  }
}

// Rows [i, i + R) x panels [p, p + P), steps [t0, t1); first: start from 0.
template <int R, int P, class Chunks, bool kPairs, bool Fused>
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
          add_pair_f32<R, P, Fused>(acc, pp, wg, in.x, k, i, t + 2 * G);
        }
      }
    }
  }
  finish_block<R, P>(acc, mask, i, p, y, ldy);
}

// Rows [i, i + R) x panels [p, p + P) over a decoded slice.
template <int R, int P, bool kPairs, bool Fused>
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
        add_pair_f32<R, P, Fused>(acc, pp, wg[pp], in.x, k, i, t0 + 2 * q);
      }
    }
  }
  finish_block<R, P>(acc, mask, i, p, y, ldy);
}

template <class Chunks, bool kPairs, bool Fused = false>
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
          chunk_block<R, P, Chunks, kPairs, Fused>(in, k, w, n, 0, p, t0, t1, t0 == 0, y, ldy);
        });
    }
    return;
  }
  // Several row blocks: each slice of 4 panels is decoded once (32 KiB,
  // cache-resident) and every row block multiplies it. Panel groups outer:
  // a group's outputs stay in cache between its slices.
  alignas(64) __m512i decoded[4 * 256 / 2];
  for (int64_t p = p_begin; p < p_end; p += 4) {
    const int64_t np = lesser(4, p_end - p);
    for (int64_t t0 = 0; t0 < k; t0 += slice) {
      const int64_t t1 = lesser(k, t0 + slice);
      decode_slice<Chunks, true>(w, k, p, np, t0, t1, decoded);
      for (int64_t i = 0; i < m; i += 4)
        with_block(m - i, np, [&]<int R, int P>() {
          decoded_block<R, P, kPairs, Fused>(in, k, decoded, n, i, p, t0, t1, t0 == 0, y, ldy);
        });
    }
  }
}

// The chunk decoder of w's format.
template <bool kPairs, bool Fused = false>
void run_format(const Inputs& in, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                int64_t p_end, float* y, int64_t ldy) {
  switch (w.format) {
    case PanelFormat::kFp8: return run<Fp8Chunks, kPairs, Fused>(in, m, k, w, n, p_begin, p_end, y, ldy);
    case PanelFormat::kFp8Block32:
      return run<Fp8Block32Chunks, kPairs, Fused>(in, m, k, w, n, p_begin, p_end, y, ldy);
    default: return run<Fp4Chunks, kPairs, Fused>(in, m, k, w, n, p_begin, p_end, y, ldy);
  }
}

}  // namespace

// Fast numerics: each step's product fused into the sum (the same order).
void matmul_chunked_fast(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                         int64_t p_end, float* y, int64_t ldy) {
  run_format<false, true>({x, nullptr}, m, k, w, n, p_begin, p_end, y, ldy);
}

void matmul_chunked(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                    int64_t p_end, float* y, int64_t ldy) {
  run_format<false>({x, nullptr}, m, k, w, n, p_begin, p_end, y, ldy);
}

void matmul_quantized_pairs(const uint32_t* pairs, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n,
                            int64_t p_begin, int64_t p_end, float* y, int64_t ldy) {
  run_format<true>({nullptr, pairs}, m, k, w, n, p_begin, p_end, y, ldy);
}

}  // namespace dsv4::kernels::avx512
