#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/dtype.h"

namespace dsv4 {
namespace {

TEST(DType, E4M3DecodesHandComputedValues) {
  EXPECT_EQ(e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);                 // exp 7 (bias 7), mantissa 0
  EXPECT_EQ(e4m3_to_f32(0x3C), 1.5f);                 // mantissa 100b
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);               // largest finite
  EXPECT_EQ(e4m3_to_f32(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)));
}

TEST(DType, E4M3EncodeRoundTripsEveryFiniteCode) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;  // NaN
    float v = e4m3_to_f32(static_cast<uint8_t>(code));
    if (v == 0.0f) continue;
    EXPECT_EQ(f32_to_e4m3(v), code) << code;
  }
}

TEST(DType, E2M1AndE8M0) {
  const float expect[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(e2m1_to_f32(i), expect[i]);
    EXPECT_EQ(e2m1_to_f32(i | 8), -expect[i]);
  }
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(120), 1.0f / 128);
  EXPECT_EQ(e8m0_to_f32(130), 8.0f);
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
}

TEST(DType, MinifloatRoundingTiesToEven) {
  // e4m3 between 8 and 16 has spacing 1: 9.5 is a tie -> 10 (even mantissa).
  EXPECT_EQ(round_to_e4m3(9.5f), 10.0f);
  EXPECT_EQ(round_to_e4m3(10.5f), 10.0f);
  EXPECT_EQ(round_to_e4m3(9.4999f), 9.0f);
  // e2m1 grid {0, .5, 1, 1.5, 2, 3, 4, 6}: ties to even.
  EXPECT_EQ(round_to_e2m1(2.5f), 2.0f);
  EXPECT_EQ(round_to_e2m1(5.0f), 4.0f);
  EXPECT_EQ(round_to_e2m1(0.75f), 1.0f);
  EXPECT_EQ(round_to_e2m1(0.25f), 0.0f);
  EXPECT_EQ(round_to_e2m1(-1.75f), -2.0f);
  // e4m3 subnormals: spacing 2^-9.
  EXPECT_EQ(round_to_e4m3(std::ldexp(3.4f, -9)), std::ldexp(3.0f, -9));
}

// The encoders are the rounding: over a sweep of float bit patterns (every
// exponent, both signs, and each code's neighbours and midpoints), the code's
// value is round_to_e4m3 / round_to_e2m1 of the clamped input, its sign
// included; NaN encodes as e4m3's NaN and as e2m1's +6 (the clamp's).
TEST(DType, EncodersAgreeWithTheRoundingEverywhere) {
  auto same = [](float x, float y) { return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y); };
  std::vector<float> values;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65537) values.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  for (int code = 0; code < 256; ++code) {
    const float v = e4m3_to_f32(static_cast<uint8_t>(code));
    const float next = e4m3_to_f32(static_cast<uint8_t>(code + 1));
    if (std::isnan(v)) continue;
    values.insert(values.end(), {v, std::nextafter(v, 0.0f), std::nextafter(v, 1e9f), std::nextafter(v, -1e9f)});
    if (!std::isnan(next) && (code & 0x7F) != 0x7F) {
      const float mid = (v + next) / 2;
      values.insert(values.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid});
    }
  }
  for (float g : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 448.0f, 464.0f})
    for (float v : {g, std::nextafter(g, 0.0f), std::nextafter(g, 1e9f)}) values.insert(values.end(), {v, -v});
  values.insert(values.end(), {0.0f, -0.0f, INFINITY, -INFINITY});
  for (float v : values) {
    if (std::isnan(v)) {
      EXPECT_EQ(f32_to_e4m3(v), 0x7F);
      EXPECT_EQ(f32_to_e2m1(v), 7);
      continue;
    }
    const float e4 = round_to_e4m3(std::fmax(-kE4M3Max, std::fmin(kE4M3Max, v)));
    ASSERT_TRUE(same(e4m3_to_f32(f32_to_e4m3(v)), e4)) << v;
    const float e2 = round_to_e2m1(std::fmax(-kE2M1Max, std::fmin(kE2M1Max, v)));
    ASSERT_TRUE(same(e2m1_to_f32(f32_to_e2m1(v)), e2)) << v;
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(3.0f, -8)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
}

// The Q8_0 scale of the GGUF converter: every half round-trips, a value
// halfway between two halves goes to the even one, past 65504 to infinity.
TEST(DType, F16RoundsToNearestEven) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float v = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(v)) continue;
    ASSERT_EQ(f32_to_f16(v), h) << std::hex << h;
    if ((h & 0x7FFF) >= 0x7BFF) continue;  // the next half up is infinity
    const float next = f16_to_f32(static_cast<uint16_t>(h + 1));
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    ASSERT_EQ(f32_to_f16((v + next) / 2), even) << std::hex << h;  // the midpoint is exact in f32
  }
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-1e9f), 0xFC00);
  EXPECT_EQ(f32_to_f16(1e-9f), 0x0000);
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);            // a tie between 0 and the least subnormal: even
  EXPECT_EQ(f32_to_f16(0x1.8p-24f), 0x0002);          // a tie between 1 and 2 subnormal steps: even
}

TEST(DType, Pow2Ceil) {
  EXPECT_EQ(pow2_ceil(1.0f), 1.0f);
  EXPECT_EQ(pow2_ceil(1.01f), 2.0f);
  EXPECT_EQ(pow2_ceil(0.3f), 0.5f);
  EXPECT_EQ(pow2_ceil(0.25f), 0.25f);
}

}  // namespace
}  // namespace dsv4
