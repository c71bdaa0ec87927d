// DeepSeek-V4.1's linear layers as its reference computes them. FP8 and FP4
// weights take an activation rounded to e4m3 with a power-of-two scale per
// 32 inputs, and the GEMM is block-scaled: per K block of 32, the products
// of the two operands' codes summed, times the activation's scale, times
// the weight's, added to the output in K order. BF16 and F32 weights are a
// plain left-to-right dot product.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4 {

struct V41Linear {
  enum class Kind { kPlain, kFp8, kFp4 };
  Kind kind = Kind::kPlain;
  int64_t out = 0, in = 0;
  // kPlain: the weights [out, in]; kFp8 / kFp4: each weight's code value
  // (e4m3 / e2m1) [out, in], and the scales: FP8 one per 32 x 32 tile
  // [ceil(out / 32), in / 32], FP4 one per row and 32 inputs [out, in / 32].
  std::vector<float> w, scale;
  float weight_scale(int64_t row, int64_t block) const {
    return kind == Kind::kFp8 ? scale[(row / kBlock) * (in / kBlock) + block] : scale[row * (in / kBlock) + block];
  }
  static constexpr int64_t kBlock = 32;
};

// y[m, out] = x[m, in] W^T (x rounded first for FP8 / FP4 weights).
void v41_linear(const V41Linear& l, const float* x, int64_t m, float* y);

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
