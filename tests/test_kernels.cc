#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/dtype.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace dsv4 {
namespace {

TEST(Kernels, HadamardMatchesSylvesterMatrix) {
  const int n = 16;
  std::vector<float> x(n), y(n, 0.0f);
  for (int i = 0; i < n; ++i) x[i] = std::sin(1.0f + i);
  // H[i][j] = (-1)^popcount(i & j) for Sylvester's construction.
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < n; ++i) y[j] += x[i] * ((__builtin_popcount(i & j) & 1) ? -1.0f : 1.0f) / 4.0f;
  std::vector<float> scratch(n);
  kernels::kernels_for(kernels::Isa::kGeneric, kernels::Numerics::kExact).hadamard(x.data(), n, scratch.data());
  for (int i = 0; i < n; ++i) EXPECT_NEAR(x[i], y[i], 1e-6f);
}

TEST(Kernels, SumAddsInPyTorchsLaneOrder) {
  // 16 values are two 8-lane vectors: lane l holds x[l] + x[8 + l], then the
  // lanes are added left to right. Left to right over x would lose the ones
  // next to 1e8 (its float spacing is 8) and give 7; the lane order cancels
  // the 1e8s first and keeps every one: 14.
  std::vector<float> x(16, 1.0f);
  x[0] = 1e8f;
  x[8] = -1e8f;
  float sequential = 0.0f;
  for (float v : x) sequential += v;
  EXPECT_EQ(sequential, 7.0f);
  EXPECT_EQ(kernels::sum(x.data(), 16), 14.0f);
  // Fewer than 8 values: four interleaved partial sums, the leftovers added
  // to the first: ((((x0 + x4) + x5) + x1) + x2) + x3.
  std::vector<float> y = {1e8f, 1.0f, 1.0f, 1.0f, -1e8f, 4.0f};
  EXPECT_EQ(kernels::sum(y.data(), 6), 7.0f);
}

TEST(Kernels, SumOuterCascadesEverySixteenRows) {
  // 32 rows: two groups of 16 summed separately, then added. Added left to
  // right, each 1 after the 1e8 is lost (float spacing 8 there): 1e8.
  // Grouped, the sixteen ones make 16 first: 1e8 + 16.
  std::vector<float> x(32, 0.0f);
  x[0] = 1e8f;
  for (int i = 16; i < 32; ++i) x[i] = 1.0f;
  EXPECT_EQ(kernels::sum_outer(x.data(), 32, 1), 100000016.0f);
  // Strided: the same column read out of rows of 3.
  std::vector<float> rows(32 * 3, -5.0f);
  for (int i = 0; i < 32; ++i) rows[i * 3 + 1] = x[i];
  EXPECT_EQ(kernels::sum_outer(rows.data() + 1, 32, 3), 100000016.0f);
}

TEST(Kernels, VectorExpAndLog1pAreWithinOneUlpOfLibm) {
  for (float x = -90.0f; x < 80.0f; x += 0.37f) {
    const float e = kernels::vexp(x), ref = std::exp(x);
    EXPECT_LE(std::fabs(e - ref), std::nextafter(ref, INFINITY) - ref) << x;
  }
  for (float x = 0.0f; x < 1e6f; x = x * 1.7f + 0.01f) {
    const float l = kernels::vlog1p(x), ref = std::log1p(x);
    EXPECT_LE(std::fabs(l - ref), std::nextafter(ref, INFINITY) - ref) << x;
  }
  EXPECT_EQ(kernels::vexp(-INFINITY), 0.0f);
  EXPECT_EQ(kernels::vexp(200.0f), INFINITY);
  EXPECT_EQ(kernels::vlog1p(-1.0f), -INFINITY);
}

TEST(Kernels, ElementwiseTailUsesLibm) {
  // The last n % 16 elements take PyTorch's scalar path.
  EXPECT_TRUE(kernels::simd_element(15, 20));
  EXPECT_FALSE(kernels::simd_element(16, 20));
  EXPECT_FALSE(kernels::simd_element(3, 8));
  for (float x = -10.0f; x < 10.0f; x += 0.013f) {
    EXPECT_EQ(kernels::sigmoid_at(x, 20, 21), 1.0f / (1.0f + std::exp(-x)));
    EXPECT_EQ(kernels::sigmoid_at(x, 0, 16), 1.0f / (1.0f + kernels::vexp(-x)));
  }
}

TEST(Kernels, Fp8QuantDequantUsesPowerOfTwoScales) {
  std::vector<float> x = {1.0f, -3.3f, 0.01f, 448.0f / 64};  // amax 7 -> scale 2^-6 (7/448 = 1/64)
  std::vector<float> rounded = x;
  kernels::fp8_quant_dequant(rounded.data(), 4, 4);
  const float scale = std::ldexp(1.0f, -6);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rounded[i], round_to_e4m3(x[i] / scale) * scale);
}

TEST(Kernels, Fp4QuantDequantRoundsToTheGrid) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = 0.37f * (i - 16);
  std::vector<float> y = x;
  kernels::fp4_quant_dequant(y.data(), 32, 32);
  const float scale = pow2_ceil(16 * 0.37f / 6.0f);  // amax 5.92 -> scale 1
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], round_to_e2m1(x[i] / scale) * scale);
}

TEST(Kernels, RopeInverseUndoesRope) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6}, orig = x;
  float cos[3], sin[3];
  for (int i = 0; i < 3; ++i) {
    cos[i] = std::cos(0.3f * (i + 1));
    sin[i] = std::sin(0.3f * (i + 1));
  }
  kernels::rope(x.data(), cos, sin, 3, false);
  EXPECT_NEAR(x[0], 1 * cos[0] - 2 * sin[0], 1e-6f);
  EXPECT_NEAR(x[1], 1 * sin[0] + 2 * cos[0], 1e-6f);
  kernels::rope(x.data(), cos, sin, 3, true);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(x[i], orig[i], 1e-5f);
}

TEST(Kernels, MatmulMatchesNaive) {
  const int m = 3, k = 37, n = 10;
  std::vector<float> x(m * k), w(n * k), y(m * n);
  for (int i = 0; i < m * k; ++i) x[i] = std::cos(0.1f * i);
  for (int i = 0; i < n * k; ++i) w[i] = std::sin(0.07f * i);
  kernels::matmul_nt(x.data(), m, k, w.data(), 0, n, y.data(), n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int t = 0; t < k; ++t) ref += double(x[i * k + t]) * w[j * k + t];
      EXPECT_NEAR(y[i * n + j], ref, 1e-4);
    }
}

}  // namespace
}  // namespace dsv4
