// The packed-panel GEMMs on AVX2 (for CPUs without AVX-512): a panel's 16
// outputs in two 8-lane vectors, up to 4 rows per block, every output
// adding its products left to right (multiply, round, add, round) as the
// generic kernels. BF16 panels widen in registers; FP8/FP4 chunks are
// decoded to f32 (exact: a code's value times a power of two) one panel
// slice at a time; BF16-pair inputs are widened back to f32 as they are read
// (their products are exact either way). W8A8 sums int8 products exactly
// with VPMADDWD.
#include <immintrin.h>

#include "base/dtype.h"
#include "kernels/isa_local.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"

namespace dsv4::kernels::avx2 {
namespace {

// Input steps per slice when a panel is decoded to f32 first (16 KiB).
constexpr int64_t kDecodedSlice = 256;

// Where the rows' inputs come from: f32 rows, or BF16 pair rows.
struct F32Rows {
  const float* x;
  int64_t k;
  float at(int64_t i, int64_t t) const { return x[i * k + t]; }
};

struct PairRows {
  const uint32_t* pairs;
  int64_t k;
  float at(int64_t i, int64_t t) const {
    const uint32_t pair = pairs[(i * k + t) / 2];
    return __builtin_bit_cast(float, t % 2 ? pair << 16 : pair & 0xFFFF0000u);
  }
};

// Where a panel's 16 weights at step t come from.
struct F32Src {
  const float* packed;
  int64_t k;
  __m256 load(int64_t p, int64_t t, int half) const { return _mm256_loadu_ps(packed + (p * k + t) * kPanel + 8 * half); }
};

struct Bf16Src {
  const uint8_t* codes;
  int64_t k;
  __m256 load(int64_t p, int64_t t, int half) const {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + ((p * k + t) * kPanel + 8 * half) * 2));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
  }
};

// One panel's weights for steps [t0, t0 + len), decoded: [len][16] f32.
struct DecodedSrc {
  const float* buf;
  int64_t t0;
  __m256 load(int64_t, int64_t t, int half) const { return _mm256_loadu_ps(buf + (t - t0) * kPanel + 8 * half); }
};

inline __m256i lane_mask(int64_t cols, int half) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(cols - 8 * half)), lane);
}

// Rows [i, i + R) of panel p over steps [t0, t1); first: start from 0.
template <int R, class Rows, class Src>
void block(const Rows& x, const Src& src, int64_t n, int64_t i, int64_t p, int64_t t0, int64_t t1, bool first,
           float* y, int64_t ldy) {
  const int64_t cols = lesser(kPanel, n - p * kPanel);
  const __m256i mask[2] = {lane_mask(cols, 0), lane_mask(cols, 1)};
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < 2; ++h)
      acc[r][h] = first ? _mm256_setzero_ps() : _mm256_maskload_ps(y + (i + r) * ldy + p * kPanel + 8 * h, mask[h]);
  for (int64_t t = t0; t < t1; ++t) {
    const __m256 w0 = src.load(p, t, 0), w1 = src.load(p, t, 1);
    for (int r = 0; r < R; ++r) {
      const __m256 xb = _mm256_set1_ps(x.at(i + r, t));
      acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_mul_ps(xb, w0));
      acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_mul_ps(xb, w1));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < 2; ++h) _mm256_maskstore_ps(y + (i + r) * ldy + p * kPanel + 8 * h, mask[h], acc[r][h]);
}

template <class Rows, class Src>
void rows_of_panel(const Rows& x, int64_t m, const Src& src, int64_t n, int64_t p, int64_t t0, int64_t t1, float* y,
                   int64_t ldy) {
  for (int64_t i = 0; i < m; i += 4) {
    const bool first = t0 == 0;
    switch (lesser(4, m - i)) {
      case 1: block<1>(x, src, n, i, p, t0, t1, first, y, ldy); break;
      case 2: block<2>(x, src, n, i, p, t0, t1, first, y, ldy); break;
      case 3: block<3>(x, src, n, i, p, t0, t1, first, y, ldy); break;
      default: block<4>(x, src, n, i, p, t0, t1, first, y, ldy); break;
    }
  }
}

template <class Src>
void run(const float* x, int64_t m, int64_t k, const Src& src, int64_t n, int64_t p_begin, int64_t p_end, float* y,
         int64_t ldy) {
  if (k == 0) return zero_outputs(m, n, kPanel, p_begin, p_end, y, ldy);
  const int64_t slice = slice_steps(m, k);
  for (int64_t t0 = 0; t0 < k; t0 += slice)
    for (int64_t p = p_begin; p < p_end; ++p)
      rows_of_panel(F32Rows{x, k}, m, src, n, p, t0, lesser(k, t0 + slice), y, ldy);
}

// Where each code of a chunk goes: (step in chunk, column) per byte and
// nibble, the inverse of code_position.
struct ChunkMap {
  int8_t step[kChunkBytes][2], column[kChunkBytes][2];
  void build(PanelFormat f) {
    const int64_t steps = chunk_steps(f);
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t c = 0; c < kPanel; ++c) {
        const CodePosition at = code_position(f, steps, 0, t, c);
        step[at.byte][at.nibble] = static_cast<int8_t>(t);
        column[at.byte][at.nibble] = static_cast<int8_t>(c);
      }
  }
};

// Panel p's FP8/FP4 weights for steps [t0, t1) into out [t1 - t0][16].
void decode_panel(const ChunkMap& map, const QuantizedPanels& w, int64_t k, int64_t p, int64_t t0, int64_t t1,
                  float* out) {
  const bool fp8 = is_fp8(w.format);
  const int64_t steps = chunk_steps(w.format), block = panel_block(w.format), blocks = (k + block - 1) / block;
  for (int64_t t = t0; t < t1; t += steps) {
    const uint8_t* chunk = w.codes + (p * k + t) / steps * kChunkBytes;
    const uint8_t* scales = w.scales + (p * blocks + t / block) * kPanel;
    for (int b = 0; b < kChunkBytes; ++b)
      for (int nib = 0; nib < (fp8 ? 1 : 2); ++nib) {
        const int c = map.column[b][nib];
        const float value = fp8 ? e4m3_to_f32(chunk[b]) : e2m1_to_f32((chunk[b] >> (4 * nib)) & 0xF);
        out[(t - t0 + map.step[b][nib]) * kPanel + c] = value * e8m0_to_f32(scales[c]);
      }
  }
}

// FP8/FP4 panels against either kind of rows, a decoded slice at a time
// (partial sums park in y between slices: the order stays left to right).
template <class Rows>
void run_chunked(const Rows& x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                 int64_t p_end, float* y, int64_t ldy) {
  if (k == 0) return zero_outputs(m, n, kPanel, p_begin, p_end, y, ldy);
  ChunkMap map;
  map.build(w.format);
  alignas(32) float decoded[kDecodedSlice * kPanel];
  for (int64_t t0 = 0; t0 < k; t0 += kDecodedSlice) {
    const int64_t t1 = lesser(k, t0 + kDecodedSlice);
    for (int64_t p = p_begin; p < p_end; ++p) {
      decode_panel(map, w, k, p, t0, t1, decoded);
      rows_of_panel(x, m, DecodedSrc{decoded, t0}, n, p, t0, t1, y, ldy);
    }
  }
}

void matmul_f32(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, int64_t p_begin, int64_t p_end,
                float* y, int64_t ldy) {
  run(x, m, k, F32Src{packed, k}, n, p_begin, p_end, y, ldy);
}

void matmul_quantized(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                      int64_t p_end, float* y, int64_t ldy) {
  if (w.format == PanelFormat::kBf16) return run(x, m, k, Bf16Src{w.codes, k}, n, p_begin, p_end, y, ldy);
  run_chunked(F32Rows{x, k}, m, k, w, n, p_begin, p_end, y, ldy);
}

void matmul_quantized_pairs(const uint32_t* pairs, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n,
                            int64_t p_begin, int64_t p_end, float* y, int64_t ldy) {
  run_chunked(PairRows{pairs, k}, m, k, w, n, p_begin, p_end, y, ldy);
}

void matmul_int8(const uint8_t* biased, const float* row_scales, int64_t m, int64_t k, const Int8Panels& w, int64_t n,
                 int64_t p_begin, int64_t p_end, float* y, int64_t ldy) {
  const int64_t kp = int8_padded_k(k);
  // hadd leaves lanes in the order 0 1 4 5 2 3 6 7; this puts them back.
  const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
  for (int64_t p = p_begin; p < p_end; ++p) {
    const uint8_t* panel = w.codes + p * kPanel * kp;
    const uint8_t* extra = w.sums_and_scales + p * kPanel * 8;
    const int64_t cols = lesser(kPanel, n - p * kPanel);
    for (int64_t i = 0; i < m; ++i) {
      __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int64_t q = 0; q < kp / 4; ++q) {
        // The row's four activations (q - 128) as int16, repeated.
        const uint8_t* xq = biased + i * kp + q * 4;
        const int16_t a0 = static_cast<int16_t>(xq[0] - 128), a1 = static_cast<int16_t>(xq[1] - 128),
                      a2 = static_cast<int16_t>(xq[2] - 128), a3 = static_cast<int16_t>(xq[3] - 128);
        const __m256i xv = _mm256_setr_epi16(a0, a1, a2, a3, a0, a1, a2, a3, a0, a1, a2, a3, a0, a1, a2, a3);
        for (int h = 0; h < 2; ++h) {
          const uint8_t* wq = panel + q * kPanel * 4 + h * 32;
          const __m256i a = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wq))), xv);
          const __m256i b =
              _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wq + 16))), xv);
          acc[h] = _mm256_add_epi32(acc[h], _mm256_hadd_epi32(a, b));
        }
      }
      for (int h = 0; h < 2; ++h) {
        const __m256 v = _mm256_cvtepi32_ps(_mm256_permutevar8x32_epi32(acc[h], order));
        const __m256 scales = _mm256_loadu_ps(reinterpret_cast<const float*>(extra + kPanel * 4) + 8 * h);
        const __m256 out = _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(row_scales[i])), scales);
        _mm256_maskstore_ps(y + i * ldy + p * kPanel + 8 * h, lane_mask(cols, h), out);
      }
    }
  }
}

}  // namespace

void register_kernels(Kernels* exact, Kernels* fast) {
  // The exact bodies, in both tables (AVX2 has no fast ones of its own).
  auto set = [](Kernels* k) {
    k->matmul_f32 = &matmul_f32;
    k->matmul_quantized = &matmul_quantized;
    k->matmul_quantized_pairs = &matmul_quantized_pairs;
    k->matmul_int8 = &matmul_int8;
  };
  set(exact);
  set(fast);
}

}  // namespace dsv4::kernels::avx2
