// The packed-panel GEMM on AVX-512: 16 output columns per vector, blocks of
// up to 4 rows x 4 panels in registers, k in slices that stay in cache
// (partial sums park in y between slices, so every output still adds its
// products left to right: multiply, round, add, round; no FMA; the *_fast
// bodies fuse them, in the same order). BF16 panels widen in registers; FP8
// and FP4 panels are in chunked_matmul.cc.
#include <immintrin.h>

#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/register_blocks.h"
#include "kernels/isa_local.h"

namespace dsv4::kernels::avx512 {
namespace {

// Where a panel's 16 weights at step t come from.
struct F32Source {
  static constexpr int64_t kWeightBytes = 4;
  const float* packed;
  int64_t k;
  __m512 load(int64_t p, int64_t t) const { return _mm512_loadu_ps(packed + (p * k + t) * kPanel); }
};

struct Bf16Source {
  static constexpr int64_t kWeightBytes = 2;
  const uint8_t* codes;
  int64_t k;
  __m512 load(int64_t p, int64_t t) const {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + (p * k + t) * kPanel * 2));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
};

// Rows [i, i + R) x panels [p, p + P), k range [t0, t1); first: start from 0.
template <int R, int P, class Source, bool Fused>
void block(const float* x, int64_t k, const Source& src, int64_t n, int64_t i, int64_t p, int64_t t0, int64_t t1,
           bool first, float* y, int64_t ldy) {
  __m512 acc[R][P];
  __mmask16 mask[P];
  start_block<R, P>(acc, mask, n, i, p, first, y, ldy);
  for (int64_t t = t0; t < t1; ++t) {
    __m512 w[P];
    for (int pp = 0; pp < P; ++pp) w[pp] = src.load(p + pp, t);
    for (int r = 0; r < R; ++r) {
      const __m512 xb = _mm512_set1_ps(x[(i + r) * k + t]);
      for (int pp = 0; pp < P; ++pp)
        acc[r][pp] = Fused ? _mm512_fmadd_ps(xb, w[pp], acc[r][pp]) : _mm512_add_ps(acc[r][pp], _mm512_mul_ps(xb, w[pp]));
    }
  }
  finish_block<R, P>(acc, mask, i, p, y, ldy);
}

// Weight bytes of 4 panels' slice that every row block re-reads from L2.
constexpr int64_t kPanelGroupSliceBytes = 512 * 1024;

// Panel groups outer, slices of k inner: a group's slice of weights is read
// from memory once and from L2 by every row block, and the group's outputs
// (m x 64 floats) stay in cache between its slices. Slicing all panels per
// slice instead swept the whole output through memory once per slice (the
// LM head at 16 rows: 8 MiB eight times, 23% of its time).
template <class Source, bool Fused = false>
void run(const float* x, int64_t m, int64_t k, const Source& src, int64_t n, int64_t p_begin, int64_t p_end, float* y,
         int64_t ldy) {
  if (k == 0) return zero_outputs(m, n, kPanel, p_begin, p_end, y, ldy);
  const int64_t step_bytes = 4 * kPanel * Source::kWeightBytes;
  const int64_t slice = m <= 4 ? k : greater(256, kPanelGroupSliceBytes / step_bytes);
  for (int64_t p = p_begin; p < p_end; p += 4) {
    const int64_t np = lesser(4, p_end - p);
    for (int64_t t0 = 0; t0 < k; t0 += slice) {
      const int64_t t1 = lesser(k, t0 + slice);
      for (int64_t i = 0; i < m; i += 4)
        with_block(m - i, np, [&]<int R, int P>() { block<R, P, Source, Fused>(x, k, src, n, i, p, t0, t1, t0 == 0, y, ldy); });
    }
  }
}

}  // namespace

void matmul_f32(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, int64_t p_begin, int64_t p_end,
                float* y, int64_t ldy) {
  run(x, m, k, F32Source{packed, k}, n, p_begin, p_end, y, ldy);
}

void matmul_quantized(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                      int64_t p_end, float* y, int64_t ldy) {
  if (w.format == PanelFormat::kBf16) return run(x, m, k, Bf16Source{w.codes, k}, n, p_begin, p_end, y, ldy);
  matmul_chunked(x, m, k, w, n, p_begin, p_end, y, ldy);
}

void matmul_f32_fast(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, int64_t p_begin,
                     int64_t p_end, float* y, int64_t ldy) {
  run<F32Source, true>(x, m, k, F32Source{packed, k}, n, p_begin, p_end, y, ldy);
}

void matmul_quantized_fast(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                           int64_t p_end, float* y, int64_t ldy) {
  if (w.format == PanelFormat::kBf16)
    return run<Bf16Source, true>(x, m, k, Bf16Source{w.codes, k}, n, p_begin, p_end, y, ldy);
  matmul_chunked_fast(x, m, k, w, n, p_begin, p_end, y, ldy);
}

}  // namespace dsv4::kernels::avx512
