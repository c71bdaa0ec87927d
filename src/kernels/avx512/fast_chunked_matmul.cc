// FP8 and FP4 panels with BF16-pair inputs on AVX-512, fast numerics: the
// codes go into VDPBF16PS bare (no per-weight scaling), one partial sum per
// scale block, and each block's sum joins the output with one FMA by the
// block's 16 column scales. That saves the two scaling instructions per
// pair vector the exact kernel needs to keep the reference's order.
//
// Batch invariance: every output adds its blocks in k order, each block's
// pair vectors in k order, whatever the number of rows. One row block
// (decode) decodes the codes as it goes; more rows decode a 256-step slice
// of 4 panels once (slices hold whole blocks: 256 is a multiple of 128 and
// 32) for every row block. Both give the same bits (tests/test_ops.cc).
#include <immintrin.h>

#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/code_chunks.h"
#include "kernels/avx512/register_blocks.h"
#include "kernels/isa_local.h"

namespace dsv4::kernels::avx512 {
namespace {

constexpr int kPrefetchBytes = 1024;  // as the exact kernel

// 2^(e - 127) for the 16 e8m0 scales of a panel's block (loaders keep e in
// the normal range).
inline __m512 block_scales(const uint8_t* scales) {
  const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}

// Rows [i, i + R) x panels [p, p + P), steps [t0, t1) (whole blocks but
// maybe the last); decoded: the slice's bare pair vectors of these panels
// (pair q of panel pp at decoded[pp * slice_pairs + q]), or null to decode
// the codes here. The block's partial sums live in registers; the output's
// sums live in y, read and written once per block (exact f32 round trips),
// which leaves the registers to a block of 4 x 4.
template <int R, int P, class Chunks>
void fast_block(const uint32_t* pairs, int64_t k, const QuantizedPanels& w, const __m512i* decoded,
                int64_t slice_pairs, int64_t n, int64_t i, int64_t p, int64_t t0, int64_t t1, bool first, float* y,
                int64_t ldy) {
  const Chunks chunks(tables());
  const int64_t blocks = (k + Chunks::kBlock - 1) / Chunks::kBlock;
  __mmask16 mask[P];
  for (int pp = 0; pp < P; ++pp) mask[pp] = panel_mask(n, p + pp);
  for (int64_t b0 = t0; b0 < t1;) {
    const int64_t b1 = lesser(t1, (b0 / Chunks::kBlock + 1) * Chunks::kBlock);
    __m512 part[R][P];
    for (int r = 0; r < R; ++r)
      for (int pp = 0; pp < P; ++pp) part[r][pp] = _mm512_setzero_ps();
    if (decoded) {
      for (int64_t q = (b0 - t0) / 2; q < (b1 - t0) / 2; ++q) {
        __m512i wg[P];
        for (int pp = 0; pp < P; ++pp) wg[pp] = _mm512_load_si512(decoded + pp * slice_pairs + q);
        for (int r = 0; r < R; ++r) {
          const __m512i xb = _mm512_set1_epi32(static_cast<int>(pairs[((i + r) * k + t0) / 2 + q]));
          for (int pp = 0; pp < P; ++pp)
            part[r][pp] =
                _mm512_dpbf16_ps(part[r][pp], reinterpret_cast<__m512bh>(wg[pp]), reinterpret_cast<__m512bh>(xb));
        }
      }
    } else {
      for (int64_t t = b0; t < b1; t += Chunks::kSteps)
        for (int pp = 0; pp < P; ++pp) {
          __m512i g[Chunks::kGroups];
          const uint8_t* chunk = w.codes + ((p + pp) * k + t) / Chunks::kSteps * kChunkBytes;
          _mm_prefetch(reinterpret_cast<const char*>(chunk) + kPrefetchBytes, _MM_HINT_T0);
          chunks.decode(chunk, g);
          for (int G = 0; G < Chunks::kGroups; ++G)
            for (int r = 0; r < R; ++r) {
              const __m512i xb = _mm512_set1_epi32(static_cast<int>(pairs[((i + r) * k + t) / 2 + G]));
              part[r][pp] =
                  _mm512_dpbf16_ps(part[r][pp], reinterpret_cast<__m512bh>(g[G]), reinterpret_cast<__m512bh>(xb));
            }
        }
    }
    // A panel's rows are all read before any is written: rows sit ldy
    // apart, often a multiple of 4 KiB, and a read after a write whose
    // address has the same low 12 bits waits for that write (read then
    // written row by row, 16 rows of a [2048, 1024] product with ldy 2048
    // ran at 0.6x the speed of ldy 2064).
    const bool fresh = first && b0 == t0;
    for (int pp = 0; pp < P; ++pp) {
      const __m512 scale = block_scales(w.scales + ((p + pp) * blocks + b0 / Chunks::kBlock) * kPanel);
      __m512 sum[R];
      for (int r = 0; r < R; ++r)
        sum[r] = fresh ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask[pp], y + (i + r) * ldy + (p + pp) * kPanel);
      for (int r = 0; r < R; ++r)
        _mm512_mask_storeu_ps(y + (i + r) * ldy + (p + pp) * kPanel, mask[pp], _mm512_fmadd_ps(part[r][pp], scale, sum[r]));
    }
    b0 = b1;
  }
}

template <class Chunks>
void run(const uint32_t* pairs, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
         int64_t p_end, float* y, int64_t ldy) {
  if (k == 0) return zero_outputs(m, n, kPanel, p_begin, p_end, y, ldy);
  if (m == 0) return;
  if (m <= 4) {  // one row block: k start to end, decoding as it goes
    for (int64_t p = p_begin; p < p_end; p += 4)
      with_block(m, p_end - p, [&]<int R, int P>() {
        fast_block<R, P, Chunks>(pairs, k, w, nullptr, 0, n, 0, p, 0, k, true, y, ldy);
      });
    return;
  }
  alignas(64) __m512i decoded[4 * 256 / 2];
  for (int64_t p = p_begin; p < p_end; p += 4) {  // panel groups outer, as chunked_matmul.cc
    const int64_t np = lesser(4, p_end - p);
    for (int64_t t0 = 0; t0 < k; t0 += 256) {
      const int64_t t1 = lesser(k, t0 + 256), slice_pairs = (t1 - t0) / 2;
      decode_slice<Chunks, false>(w, k, p, np, t0, t1, decoded);
      for (int64_t i = 0; i < m; i += 4)
        with_block(m - i, np, [&]<int R, int P>() {
          fast_block<R, P, Chunks>(pairs, k, w, decoded, slice_pairs, n, i, p, t0, t1, t0 == 0, y, ldy);
        });
    }
  }
}

}  // namespace

void matmul_quantized_pairs_fast(const uint32_t* pairs, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n,
                                 int64_t p_begin, int64_t p_end, float* y, int64_t ldy) {
  if (w.format == PanelFormat::kFp8) return run<Fp8Chunks>(pairs, m, k, w, n, p_begin, p_end, y, ldy);
  if (w.format == PanelFormat::kFp8Block32) return run<Fp8Block32Chunks>(pairs, m, k, w, n, p_begin, p_end, y, ldy);
  if (w.format == PanelFormat::kFp4) return run<Fp4Chunks>(pairs, m, k, w, n, p_begin, p_end, y, ldy);
  matmul_quantized_pairs(pairs, m, k, w, n, p_begin, p_end, y, ldy);
}

}  // namespace dsv4::kernels::avx512
