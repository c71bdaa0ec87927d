// DeepSeek-V4.1's linear layers as its reference computes them. FP8 and FP4
// weights take an activation rounded to e4m3 with a power-of-two scale per
// 32 inputs, and the GEMM is block-scaled: per K block of 32, the products
// of the two operands' codes summed, times the activation's scale, times
// the weight's, added to the output in K order. BF16 and F32 weights are a
// plain left-to-right dot product. Weights stay in their stored format and
// are decoded a row at a time (exactly: every code value is a float).
//
// Fast numerics packs a linear once at load into the fast kernels' panels
// (ops/linear.h; FP8 as kFp8Block32), still in its stored format, and
// computes it in their order: BF16 dot products, a block's sum scaled once.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "base/scratch.h"
#include "model/collectives.h"
#include "ops/linear.h"

namespace dsv4 {

struct V41Linear {
  enum class Kind { kF32, kBf16, kFp8, kFp4 };
  Kind kind = Kind::kF32;
  int64_t out = 0, in = 0;
  // Held as stored: F32 or BF16 values [out, in]; FP8 e4m3 codes [out, in]
  // with one scale per 32 x 32 tile [ceil(out / 32), in / 32]; FP4 e2m1
  // codes two per byte (low nibble first) [out, in / 2] with one scale per
  // row and 32 inputs [out, in / 32].
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  // Read straight from the file (nothing zeroed first) into reused blocks:
  // a fast load packs each weight and frees its codes, and the next one of
  // the same size takes them with their pages still mapped (on this kind
  // of VM a fresh page costs ~10 us: seconds a checkpoint).
  ScratchVector<uint8_t> codes;
  std::vector<uint8_t> scale;  // e8m0: 2^(byte - 127)
  // An FP8 weight the reference dequantizes and uses in a plain product
  // (wo_a): its values are codes times scales, its activation unrounded.
  bool dequantized = false;
  // Tensor parallelism: 1 when whole, else this rank holds one contiguous
  // block of `parts` of the output features (out of them), which
  // v41_linear_columns gathers back into whole rows.
  int parts = 1;
  // Fast numerics: the weight as panels, the stored copy released
  // (pack_for_fast); empty in exact numerics.
  Linear panels;

  bool packed() const { return panels.out > 0; }
  // Each buffer holding the weight (for binding it to a node).
  template <class Fn>
  void for_each_buffer(Fn&& fn) const {
    fn(static_cast<const void*>(f32.data()), sizeof(float) * f32.size());
    fn(static_cast<const void*>(bf16.data()), sizeof(uint16_t) * bf16.size());
    fn(static_cast<const void*>(codes.data()), codes.size());
    fn(static_cast<const void*>(scale.data()), scale.size());
    panels.for_each_buffer(fn);
  }
  // Packs the weight for the fast kernels and releases the stored copy.
  // False, nothing changed, when a scale is outside the kernels' range
  // (kernels::scale_in_kernel_range): the linear then stays exact.
  bool pack_for_fast();
  bool block_scaled() const { return (kind == Kind::kFp8 || kind == Kind::kFp4) && !dequantized; }
  float weight_scale(int64_t row, int64_t block) const {
    const uint8_t e = kind == Kind::kFp8 ? scale[(row / kBlock) * (in / kBlock) + block] : scale[row * (in / kBlock) + block];
    return e8m0_value(e);
  }
  // 2^(e - 127), by lookup (a scale is read per row and block).
  static float e8m0_value(uint8_t e);
  // Row o as the product reads it: the code values of a block-scaled
  // weight, else the weights. w [in].
  void row(int64_t o, float* w) const;
  // Inputs [i0, i0 + n) of row o, as row() gives them (i0 a multiple of 32).
  void values(int64_t o, int64_t i0, int64_t n, float* w) const;
  // The same of rows [o0, o0 + rows), transposed: tile[i * stride + j] is
  // input i0 + i of row o0 + j.
  void values_transposed(int64_t o0, int64_t rows, int64_t i0, int64_t n, float* tile, int64_t stride) const;
  int64_t bytes() const;  // resident
  // What a linear of this kind and shape holds (bytes() once loaded), as
  // stored or packed for fast numerics (pack_for_fast).
  static int64_t held_bytes(Kind kind, int64_t out, int64_t in, bool packed = false);
  static constexpr int64_t kBlock = 32;
};

// y[m, out] = x[m, in] W^T (x rounded first for FP8 / FP4 weights).
void v41_linear(const V41Linear& l, const float* x, int64_t m, float* y);

// The same with whole rows on every rank of `group` when l holds a block of
// the output features (l.parts == group's size): each rank computes its
// block and the group gathers them. Exact: every output feature is its own
// dot product. y [m, l.out * l.parts].
void v41_linear_columns(const V41Linear& l, Collectives* group, const float* x, int64_t m, float* y);

// The same for FlashComm1: this rank keeps only its block of rows of
// `split` (over `group`), whole: y [split.count(), l.out * l.parts].
struct TokenSplit;
void v41_linear_columns_to_rows(const V41Linear& l, Collectives* group, const TokenSplit& split, const float* x,
                                int64_t m, float* y);

// The reference's act_quant(x, 32, "ue8m0"): per 32 values, amax floored
// at 1e-4, scale 2^ceil(log2(amax / 448)), codes e4m3(clamp(x / scale)).
// codes [n] e4m3 values, scales [n / 32].
void act_quant_e4m3(const float* x, int64_t n, float* codes, float* scales);
// In place: x = codes * scale (act_quant(..., inplace=True)).
void act_round_e4m3(float* x, int64_t n);
// fp4_act_quant(x, 32, inplace) with E8M0 scales (indexer q and k) and
// fp4_act_quant(x, 16, inplace, scale_dtype=e4m3) (compressed KV).
void fp4_round_e8m0(float* x, int64_t n);
void fp4_round_e4m3_scaled(float* x, int64_t n);

}  // namespace dsv4
