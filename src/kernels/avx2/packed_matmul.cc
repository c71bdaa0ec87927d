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
  for (int64_t p = p_begin; p < p_end; ++p)  // panels outer, as run_chunked
    for (int64_t t0 = 0; t0 < k; t0 += slice)
      rows_of_panel(F32Rows{x, k}, m, src, n, p, t0, lesser(k, t0 + slice), y, ldy);
}

// 8 e4m3 codes, sign-extended to 32-bit lanes, to floats: the sign to bit
// 31 and the exponent and mantissa bits to 20..26 make a float 2^-120 times
// the code's value (subnormals included), and times 2^120 is exact; the NaN
// codes (magnitude 0x7F) become NaN of their sign, as e4m3_to_f32 gives.
inline __m256 e4m3_lanes(__m256i code) {
  const __m256i bits = _mm256_and_si256(_mm256_slli_epi32(code, 20), _mm256_set1_epi32(static_cast<int>(0x87F00000u)));
  const __m256 value = _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0x1p120f));
  const __m256i nan = _mm256_cmpeq_epi32(_mm256_and_si256(code, _mm256_set1_epi32(0x7F)), _mm256_set1_epi32(0x7F));
  const __m256i nan_bits =
      _mm256_or_si256(_mm256_set1_epi32(0x7FC00000), _mm256_and_si256(bits, _mm256_set1_epi32(INT32_MIN)));
  return _mm256_blendv_ps(value, _mm256_castsi256_ps(nan_bits), _mm256_castsi256_ps(nan));
}

// 8 e2m1 codes, bits 0..3 of 32-bit lanes (higher bits ignored), to floats.
inline __m256 e2m1_lanes(__m256i code) {
  const __m256 magnitudes = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(code, _mm256_set1_epi32(8)), 28);
  return _mm256_xor_ps(_mm256_permutevar8x32_ps(magnitudes, code), _mm256_castsi256_ps(sign));
}

// 8 e8m0 scales to floats, as e8m0_to_f32.
inline __m256 e8m0_lanes(const uint8_t* scales) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales)));
  __m256i bits = _mm256_slli_epi32(v, 23);
  bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000), _mm256_cmpeq_epi32(v, _mm256_setzero_si256()));
  bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(v, _mm256_set1_epi32(255)));
  return _mm256_castsi256_ps(bits);
}

// Step t's 16 weights (two halves of 8 columns), times the columns' scales.
inline void store_step(float* out, __m256 low, __m256 high, const __m256 (&scale)[2]) {
  _mm256_storeu_ps(out, _mm256_mul_ps(low, scale[0]));
  _mm256_storeu_ps(out + 8, _mm256_mul_ps(high, scale[1]));
}

// Panel p's FP8/FP4 weights for steps [t0, t1) into out [t1 - t0][16], the
// chunks decoded in vectors (code_position's layout):
// - FP8, 4 steps: each 16-byte lane holds columns 4q..4q+3, column 4q + r's
//   step t at byte 2r + (1, 0, 9, 8)[t]; a byte shuffle makes each lane's
//   dword t step t's 4 columns, and a dword permute puts a step's 8 columns
//   of both lanes side by side.
// - FP4, 8 steps: dword c holds column c's 8 codes, step t in the nibble at
//   bit (16, 0, 20, 4, 24, 8, 28, 12)[t].
// (A scalar decode, a function call per code, ran expert GEMVs at about
// 0.1 GB/s.)
void decode_panel(const QuantizedPanels& w, int64_t k, int64_t p, int64_t t0, int64_t t1, float* out) {
  const bool fp8 = is_fp8(w.format);
  const int64_t steps = chunk_steps(w.format), block = panel_block(w.format), blocks = (k + block - 1) / block;
  const __m256i step_bytes = _mm256_setr_epi8(1, 3, 5, 7, 0, 2, 4, 6, 9, 11, 13, 15, 8, 10, 12, 14, 1, 3, 5, 7, 0, 2,
                                              4, 6, 9, 11, 13, 15, 8, 10, 12, 14);
  const __m256i side_by_side = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256 scale[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};  // set at the first chunk
  for (int64_t t = t0; t < t1; t += steps) {
    if (t == t0 || t % block == 0) {
      const uint8_t* s = w.scales + (p * blocks + t / block) * kPanel;
      scale[0] = e8m0_lanes(s);
      scale[1] = e8m0_lanes(s + 8);
    }
    const uint8_t* chunk = w.codes + (p * k + t) / steps * kChunkBytes;
    float* o = out + (t - t0) * kPanel;
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32));
    if (fp8) {
      // [steps 0, 1 | steps 2, 3] of columns 0..7 and of columns 8..15.
      const __m256i a = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(lo, step_bytes), side_by_side);
      const __m256i b = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(hi, step_bytes), side_by_side);
      for (int half = 0; half < 2; ++half) {
        const __m128i ah = half ? _mm256_extracti128_si256(a, 1) : _mm256_castsi256_si128(a);
        const __m128i bh = half ? _mm256_extracti128_si256(b, 1) : _mm256_castsi256_si128(b);
        for (int s = 0; s < 2; ++s) {
          const __m128i as = s ? _mm_srli_si128(ah, 8) : ah, bs = s ? _mm_srli_si128(bh, 8) : bh;
          store_step(o + (2 * half + s) * kPanel, e4m3_lanes(_mm256_cvtepi8_epi32(as)),
                     e4m3_lanes(_mm256_cvtepi8_epi32(bs)), scale);
        }
      }
    } else {
      constexpr int kShift[8] = {16, 0, 20, 4, 24, 8, 28, 12};
      for (int s = 0; s < 8; ++s) {
        const __m128i shift = _mm_cvtsi32_si128(kShift[s]);
        store_step(o + s * kPanel, e2m1_lanes(_mm256_srl_epi32(lo, shift)), e2m1_lanes(_mm256_srl_epi32(hi, shift)),
                   scale);
      }
    }
  }
}

// FP8/FP4 panels against either kind of rows, a decoded slice at a time
// (partial sums park in y between slices: the order stays left to right).
template <class Rows>
void run_chunked(const Rows& x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                 int64_t p_end, float* y, int64_t ldy) {
  if (k == 0) return zero_outputs(m, n, kPanel, p_begin, p_end, y, ldy);
  alignas(32) float decoded[kDecodedSlice * kPanel];
  for (int64_t p = p_begin; p < p_end; ++p)  // panels outer: a panel's outputs stay in cache between its slices
    for (int64_t t0 = 0; t0 < k; t0 += kDecodedSlice) {
      const int64_t t1 = lesser(k, t0 + kDecodedSlice);
      decode_panel(w, k, p, t0, t1, decoded);
      rows_of_panel(x, m, DecodedSrc{decoded, t0}, n, p, t0, t1, y, ldy);
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
