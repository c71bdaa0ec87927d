// Elementary functions computed the way the reference's vectorized PyTorch
// CPU kernels compute them: SLEEF's 1-ULP single-precision algorithms (AVX2
// build: multiply-adds fused, everything else rounded per operation). A
// correctly rounded libm differs from these in the last bit now and then,
// and with FP8 activation rounding one such bit can flip a rounded value.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/generic/generic_kernels.h"
#include "kernels/kernels.h"

namespace dsv4::kernels {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// 2^q for q in the normal range, built from the exponent field.
float pow2i(int32_t q) { return from_bits(static_cast<uint32_t>(q + 0x7f) << 23); }

// u * 2^q in two steps so that q may reach beyond one float exponent range.
float ldexp2(float u, int32_t q) { return u * pow2i(q >> 1) * pow2i(q - (q >> 1)); }

int32_t bits_of(float f) {
  int32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Double-float arithmetic: a value carried as hi + lo.
struct DF {
  float hi, lo;
};

DF df_add(float x, float y) {  // x + y, |x| >= |y|
  const float s = x + y;
  return {s, (x - s) + y};
}

DF df_add(DF x, DF y) {
  const float s = x.hi + y.hi;
  return {s, (((x.hi - s) + y.hi) + x.lo) + y.lo};
}

DF df_add(DF x, float y) {
  const float s = x.hi + y;
  return {s, ((x.hi - s) + y) + x.lo};
}

DF df_mul(DF x, float y) {
  const float s = x.hi * y;
  return {s, std::fma(x.lo, y, std::fma(x.hi, y, -s))};
}

DF df_div(DF n, DF d) {
  const float t = 1.0f / d.hi;
  const float s = n.hi * t;
  const float u = std::fma(t, n.hi, -s);
  const float v = std::fma(-d.lo, t, std::fma(-d.hi, t, 1.0f));
  return {s, std::fma(s, v, std::fma(n.lo, t, u))};
}

}  // namespace

float vlog1p(float d) {
  float dp1 = d + 1.0f;
  const bool tiny = dp1 < 1.17549435e-38f;  // FLT_MIN: scale up by 2^64 first
  if (tiny) dp1 = dp1 * (18446744073709551616.0f);
  int32_t e = ((bits_of(dp1 * (1.0f / 0.75f)) >> 23) & 0xff) - 0x7f;
  const float t = from_bits(static_cast<uint32_t>(bits_of(1.0f) + (-e * (1 << 23))));
  const float m = std::fma(d, t, t - 1.0f);
  if (tiny) e -= 64;
  DF s = df_mul(DF{0.69314718246459960938f, -1.904654323148236017e-09f}, static_cast<float>(e));
  const DF x = df_div(DF{m, 0.0f}, df_add(2.0f, m));
  const float x2 = x.hi * x.hi;
  float p = 0.3027294874e+0f;
  p = std::fma(p, x2, 0.3996108174e+0f);
  p = std::fma(p, x2, 0.6666694880e+0f);
  s = df_add(s, DF{x.hi * 2.0f, x.lo * 2.0f});
  s = df_add(s, x2 * x.hi * p);
  float r = s.hi + s.lo;
  if (d > 1e+38f) r = INFINITY;
  if (-1.0f > d) r = NAN;
  if (d == -1.0f) r = -INFINITY;
  if (d == 0.0f && std::signbit(d)) r = -0.0f;
  return r;
}

float vexp(float d) {
  if (d < -104.0f) return 0.0f;
  if (d > 100.0f) return INFINITY;
  if (std::isnan(d)) return d;
  constexpr float kLog2e = 1.442695040888963407359924681001892137426645954152985934135449406931f;
  constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187045e-06f;
  // Round to nearest even, like cvtps2dq under the default rounding mode.
  const int32_t q = static_cast<int32_t>(std::nearbyint(d * kLog2e));
  const float qf = static_cast<float>(q);
  float s = std::fma(qf, -kLn2Hi, d);
  s = std::fma(qf, -kLn2Lo, s);
  float u = 0.000198527617612853646278381f;
  u = std::fma(u, s, 0.00139304355252534151077271f);
  u = std::fma(u, s, 0.00833336077630519866943359f);
  u = std::fma(u, s, 0.0416664853692054748535156f);
  u = std::fma(u, s, 0.166666671633720397949219f);
  u = std::fma(u, s, 0.5f);
  u = 1.0f + std::fma(s * s, u, s);
  return ldexp2(u, q);
}

float sigmoid_at(float x, int64_t index, int64_t n) {
  return simd_element(index, n) ? 1.0f / (1.0f + vexp(0.0f - x)) : 1.0f / (1.0f + std::exp(-x));
}

float silu_at(float x, int64_t index, int64_t n) {
  return simd_element(index, n) ? x / (1.0f + vexp(-x)) : x / (1.0f + std::exp(-x));
}

float softplus_at(float x, int64_t index, int64_t n) {
  if (x > 20.0f) return x;  // PyTorch's default threshold
  return simd_element(index, n) ? vlog1p(vexp(x)) : std::log1p(std::exp(x));
}

namespace generic {

void silu(float* x, int64_t n, int64_t index0, int64_t total) {
  for (int64_t i = 0; i < n; ++i) x[i] = silu_at(x[i], index0 + i, total);
}

}  // namespace generic
}  // namespace dsv4::kernels
