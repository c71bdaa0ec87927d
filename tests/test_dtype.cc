#include <gtest/gtest.h>

#include <cmath>

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
