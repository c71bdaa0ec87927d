#include "model/v41_linear.h"

#include <algorithm>
#include <cmath>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"

namespace dsv4 {
namespace {

constexpr int64_t kBlock = V41Linear::kBlock;

float abs_max(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(x[i]));
  return m;
}

float e4m3(float x) { return round_to_e4m3(std::fmax(-kE4M3Max, std::fmin(kE4M3Max, x))); }

// Every code's value, so a row decodes by lookup.
struct CodeTables {
  float e4m3[256], e2m1[16];
  CodeTables() {
    for (int i = 0; i < 256; ++i) e4m3[i] = e4m3_to_f32(static_cast<uint8_t>(i));
    for (int i = 0; i < 16; ++i) e2m1[i] = e2m1_to_f32(static_cast<uint8_t>(i));
  }
};
const CodeTables& tables() {
  static const CodeTables t;
  return t;
}

// Rounds [n] through e2m1 with the scale of each group of `group` values.
template <typename ScaleOf>
void fp4_round(float* x, int64_t n, int64_t group, ScaleOf scale_of) {
  for (int64_t g = 0; g < n; g += group) {
    const float s = scale_of(abs_max(x + g, group));
    for (int64_t i = g; i < g + group; ++i)
      x[i] = round_to_e2m1(std::fmax(-kE2M1Max, std::fmin(kE2M1Max, x[i] / s))) * s;
  }
}

}  // namespace

void act_quant_e4m3(const float* x, int64_t n, float* codes, float* scales) {
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    // amax * f32(1/448), rounded up to a power of two from its bits.
    const float s = pow2_ceil(std::fmax(abs_max(xb, kBlock), 1e-4f) * (1.0f / kE4M3Max));
    scales[b] = s;
    for (int64_t i = 0; i < kBlock; ++i) codes[b * kBlock + i] = e4m3(xb[i] / s);
  }
}

void act_round_e4m3(float* x, int64_t n) {
  float codes[kBlock], scale;
  for (int64_t b = 0; b < n; b += kBlock) {
    act_quant_e4m3(x + b, kBlock, codes, &scale);
    for (int64_t i = 0; i < kBlock; ++i) x[b + i] = codes[i] * scale;
  }
}

void fp4_round_e8m0(float* x, int64_t n) {
  const float min_amax = 6.0f * std::ldexp(1.0f, -126);
  fp4_round(x, n, 32, [&](float amax) { return pow2_ceil(std::fmax(amax, min_amax) * (1.0f / kE2M1Max)); });
}

void fp4_round_e4m3_scaled(float* x, int64_t n) {
  const float min_amax = 6.0f * std::ldexp(1.0f, -9);
  fp4_round(x, n, 16, [&](float amax) { return e4m3(std::fmax(amax, min_amax) / kE2M1Max); });
}

void V41Linear::row(int64_t o, float* w) const {
  switch (kind) {
    case Kind::kF32: std::copy_n(&f32[o * in], in, w); break;
    case Kind::kBf16:
      for (int64_t i = 0; i < in; ++i) w[i] = bf16_to_f32(bf16[o * in + i]);
      break;
    case Kind::kFp8: {
      const uint8_t* c = &codes[o * in];
      for (int64_t i = 0; i < in; ++i) w[i] = tables().e4m3[c[i]];
      if (dequantized)
        for (int64_t i = 0; i < in; ++i) w[i] *= weight_scale(o, i / kBlock);
      break;
    }
    case Kind::kFp4: {
      const uint8_t* c = &codes[o * in / 2];  // in is a multiple of 32
      for (int64_t i = 0; i < in / 2; ++i) {
        w[2 * i] = tables().e2m1[c[i] & 0xF];
        w[2 * i + 1] = tables().e2m1[c[i] >> 4];
      }
      break;
    }
  }
}

int64_t V41Linear::bytes() const {
  return static_cast<int64_t>(4 * f32.size() + 2 * bf16.size() + codes.size() + scale.size());
}

int64_t V41Linear::held_bytes(Kind kind, int64_t out, int64_t in) {
  switch (kind) {
    case Kind::kF32: return 4 * out * in;
    case Kind::kBf16: return 2 * out * in;
    case Kind::kFp8: return out * in + (out + kBlock - 1) / kBlock * (in / kBlock);
    case Kind::kFp4: return out * in / 2 + out * (in / kBlock);
  }
  return 0;
}

void v41_linear(const V41Linear& l, const float* x, int64_t m, float* y) {
  const int64_t in = l.in, out = l.out, blocks = in / kBlock;
  std::vector<float> codes, scales;
  if (l.block_scaled()) {
    codes.resize(m * in);
    scales.resize(m * blocks);
    for (int64_t r = 0; r < m; ++r) act_quant_e4m3(x + r * in, in, &codes[r * in], &scales[r * blocks]);
  }
  // Each weight row decoded once, then every input row against it.
  parallel_for(out, std::max<int64_t>(1, 16 / std::max<int64_t>(m, 1)), [&](int64_t o0, int64_t o1) {
    std::vector<float> w(in), wscale(blocks);
    for (int64_t o = o0; o < o1; ++o) {
      l.row(o, w.data());
      if (l.block_scaled())
        for (int64_t b = 0; b < blocks; ++b) wscale[b] = l.weight_scale(o, b);
      for (int64_t r = 0; r < m; ++r) {
        if (!l.block_scaled()) {
          y[r * out + o] = kernels::dot(x + r * in, w.data(), in);
          continue;
        }
        float acc = 0.0f;
        for (int64_t b = 0; b < blocks; ++b) {
          const float partial = kernels::dot(&codes[r * in + b * kBlock], &w[b * kBlock], kBlock);
          acc += partial * scales[r * blocks + b] * wscale[b];
        }
        y[r * out + o] = acc;
      }
    }
  });
}

}  // namespace dsv4
