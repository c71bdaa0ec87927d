#include <cmath>

#include "base/dtype.h"
#include "kernels/kernels.h"

namespace dsv4::kernels {
namespace {

// As the reference: amax floored at min_amax, times (1/max), then
// 2^ceil(log2(.)) in float32.
float block_scale(float amax, float max_value, float min_amax) {
  amax = std::fmax(amax, min_amax);
  return std::ldexp(1.0f, static_cast<int>(std::ceil(std::log2(amax * (1.0f / max_value)))));
}

// Shared shape of the reference's act_quant / fp4_act_quant round trip.
template <float (*Round)(float)>
void quant_dequant(float* x, int64_t n, int64_t block, float max_value, float min_amax) {
  for (int64_t b = 0; b < n; b += block) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + block; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float scale = block_scale(amax, max_value, min_amax);
    for (int64_t i = b; i < b + block; ++i) {
      float q = std::fmax(-max_value, std::fmin(max_value, x[i] / scale));
      x[i] = Round(q) * scale;
    }
  }
}

constexpr float kFp8MinAmax = 1e-4f;
const float kFp4MinAmax = 6.0f * std::ldexp(1.0f, -126);

}  // namespace

float fp8_block_scale(float amax) { return block_scale(amax, kE4M3Max, kFp8MinAmax); }
float fp4_block_scale(float amax) { return block_scale(amax, kE2M1Max, kFp4MinAmax); }

void fp8_quant_dequant(float* x, int64_t n, int64_t block) {
  quant_dequant<round_to_e4m3>(x, n, block, kE4M3Max, kFp8MinAmax);
}

void fp4_quant_dequant(float* x, int64_t n, int64_t block) {
  quant_dequant<round_to_e2m1>(x, n, block, kE2M1Max, kFp4MinAmax);
}

}  // namespace dsv4::kernels
