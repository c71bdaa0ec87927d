#include "base/dtype.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace dsv4 {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kBF16: case DType::kF16: return 2;
    case DType::kF8E4M3: case DType::kF8E8M0: case DType::kI8: case DType::kU8: return 1;
    case DType::kI64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kF8E8M0: return "F8_E8M0";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
  }
  return "?";
}

bool dtype_from_name(const std::string& name, DType* out) {
  static const struct { const char* name; DType type; } kTable[] = {
      {"F32", DType::kF32},      {"BF16", DType::kBF16},    {"F16", DType::kF16},
      {"F8_E4M3", DType::kF8E4M3}, {"F8_E8M0", DType::kF8E8M0}, {"I8", DType::kI8},
      {"U8", DType::kU8},        {"I32", DType::kI32},      {"I64", DType::kI64},
  };
  for (const auto& e : kTable) {
    if (name == e.name) {
      *out = e.type;
      return true;
    }
  }
  return false;
}

uint16_t f32_to_bf16(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  if (std::isnan(v)) return 0x7FC0;
  uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f16_to_f32(uint16_t v) {
  uint32_t sign = (v >> 15) & 1, exp = (v >> 10) & 0x1F, mant = v & 0x3FF;
  float mag;
  if (exp == 0) mag = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) mag = mant ? NAN : INFINITY;
  else mag = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -mag : mag;
}

uint16_t f32_to_f16(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  if (std::isnan(v)) return sign | 0x7E00;
  const float mag = std::fabs(v);
  if (mag >= 65520.0f) return sign | 0x7C00;  // rounds past the largest half (65504)
  if (mag < 6.103515625e-05f) {               // subnormal: a multiple of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(mag, 24)));
  }
  // Normal: keep 10 of the 23 mantissa bits, ties to even.
  const uint32_t m = bits & 0x7FFFFFFF;
  const uint32_t rounded = m + 0xFFF + ((m >> 13) & 1);
  return sign | static_cast<uint16_t>((rounded >> 13) - ((127 - 15) << 10));
}

float e4m3_to_f32(uint8_t v) {
  uint32_t sign = v >> 7, exp = (v >> 3) & 0xF, mant = v & 7;
  float mag;
  if (exp == 15 && mant == 7) mag = NAN;
  else if (exp == 0) mag = std::ldexp(static_cast<float>(mant), -9);
  else mag = std::ldexp(static_cast<float>(mant | 8), static_cast<int>(exp) - 10);
  return sign ? -mag : mag;
}

float e2m1_to_f32(uint8_t nibble) {
  static const float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float mag = kValues[nibble & 7];
  return (nibble & 8) ? -mag : mag;
}

float round_to_minifloat(float x, int mantissa_bits, int min_exponent) {
  if (x == 0.0f || !std::isfinite(x)) return x;
  // The exponent e of |x| in [2^e, 2^(e+1)) from its bits (a float
  // subnormal is far below any format's smallest normal).
  const int biased = static_cast<int>(std::bit_cast<uint32_t>(x) >> 23 & 0xFF);
  const int e = std::max(biased - 127, min_exponent);
  const float quantum = std::bit_cast<float>(static_cast<uint32_t>(e - mantissa_bits + 127) << 23);
  return std::nearbyint(x / quantum) * quantum;  // default rounding mode: ties to even
}

// Both encoders round as round_to_e4m3 / round_to_e2m1 do (ties to even,
// after clamping to the format's range) with integer and compare steps
// instead of a division and nearbyint: they run once per weight in
// mkmodel and the converters and once per cache value (DType tests check
// them against the rounding over a sweep of floats).
uint8_t f32_to_e4m3(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint8_t sign = static_cast<uint8_t>(bits >> 24 & 0x80);
  const uint32_t a = bits & 0x7FFFFFFF;
  if (a > 0x7F800000) return 0x7F;                             // NaN
  if (a >= std::bit_cast<uint32_t>(kE4M3Max)) return sign | 0x7E;  // clamped to 448
  if (a < 0x3C800000) {  // below 2^-6: subnormal codes, multiples of 2^-9
    // x + 2^23 - 2^23 rounds x (< 2^22) to an integer, ties to even.
    const float q = (std::bit_cast<float>(a) * 512.0f + 8388608.0f) - 8388608.0f;
    return sign | static_cast<uint8_t>(q);  // 8 is the smallest normal's code
  }
  // Keep 3 of the 23 mantissa bits, ties to even (a carry moves the
  // exponent up), then rebias the exponent from 127 to 7.
  const uint32_t rounded = (a + 0x7FFFF + (a >> 20 & 1)) >> 20;
  return sign | static_cast<uint8_t>(rounded - ((127 - 7) << 3));
}

uint8_t f32_to_e2m1(float v) {
  if (std::isnan(v)) return 7;  // clamping takes NaN to +6, as fmin / fmax do
  const float a = std::fabs(v);
  // The grid 0, 0.5, 1, 1.5, 2, 3, 4, 6 and its midpoints; a tie goes to
  // the even code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2,
  // 3.5 -> 4, 5 -> 4).
  const int code = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  return static_cast<uint8_t>((std::signbit(v) ? 8 : 0) | code);
}

float pow2_ceil(float x) {
  int exp;
  float m = std::frexp(x, &exp);  // x = m * 2^exp, m in [0.5, 1)
  return m == 0.5f ? x : std::ldexp(1.0f, exp);
}

}  // namespace dsv4
