// Element types of checkpoints and the scalar conversions between them.
// The FP8/FP4 formats follow the released DeepSeek-V4 checkpoints:
// e4m3fn weights and activations, ue8m0 power-of-two scales, e2m1 experts.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

namespace dsv4 {

enum class DType { kF32, kBF16, kF16, kF8E4M3, kF8E8M0, kI8, kU8, kI32, kI64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // safetensors spelling: "F32", "BF16", ...
bool dtype_from_name(const std::string& name, DType* out);

// Inline: the embedding converts a row of thousands a token.
inline float bf16_to_f32(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }
uint16_t f32_to_bf16(float v);  // round to nearest even
float f16_to_f32(uint16_t v);
uint16_t f32_to_f16(float v);  // round to nearest even, overflow to infinity
float e4m3_to_f32(uint8_t v);
uint8_t f32_to_e4m3(float v);  // round to nearest even, saturating at +-448
// 2^(v-127); 0xFF is NaN. Inline: attention decodes a scale every 16 codes.
inline float e8m0_to_f32(uint8_t v) {
  if (v == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  // The biased exponent itself (2^-127 is a float subnormal).
  return v ? std::bit_cast<float>(static_cast<uint32_t>(v) << 23) : std::bit_cast<float>(uint32_t{0x00400000});
}
float e2m1_to_f32(uint8_t nibble);
uint8_t f32_to_e2m1(float v);  // round to nearest even, saturating at +-6

// Round to the nearest value a float format with `mantissa_bits` and smallest
// normal exponent `min_exponent` can hold (ties to even, subnormals included).
// No saturation: callers clamp first, as the reference does.
float round_to_minifloat(float x, int mantissa_bits, int min_exponent);
inline float round_to_e4m3(float x) { return round_to_minifloat(x, 3, -6); }
inline float round_to_e2m1(float x) { return round_to_minifloat(x, 1, 0); }

// Smallest power of two >= x (x > 0): the ue8m0 scale rounding.
float pow2_ceil(float x);

constexpr float kE4M3Max = 448.0f;
constexpr float kE2M1Max = 6.0f;

}  // namespace dsv4
