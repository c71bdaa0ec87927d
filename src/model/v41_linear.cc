#include "model/v41_linear.h"

#include <algorithm>
#include <cmath>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "model/token_split.h"

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
  float e4m3[256], e2m1[16], e8m0[256];
  CodeTables() {
    for (int i = 0; i < 256; ++i) e4m3[i] = e4m3_to_f32(static_cast<uint8_t>(i));
    for (int i = 0; i < 16; ++i) e2m1[i] = e2m1_to_f32(static_cast<uint8_t>(i));
    for (int i = 0; i < 256; ++i) e8m0[i] = std::ldexp(1.0f, i - 127);
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

void V41Linear::row(int64_t o, float* w) const { values(o, 0, in, w); }

void V41Linear::values(int64_t o, int64_t i0, int64_t n, float* w) const {
  switch (kind) {
    case Kind::kF32: std::copy_n(&f32[o * in + i0], n, w); break;
    case Kind::kBf16:
      for (int64_t i = 0; i < n; ++i) w[i] = bf16_to_f32(bf16[o * in + i0 + i]);
      break;
    case Kind::kFp8: {
      const uint8_t* c = &codes[o * in + i0];
      const float* t = tables().e4m3;
      for (int64_t i = 0; i < n; ++i) w[i] = t[c[i]];
      if (dequantized)
        for (int64_t i = 0; i < n; ++i) w[i] *= weight_scale(o, (i0 + i) / kBlock);
      break;
    }
    case Kind::kFp4: {
      const uint8_t* c = &codes[(o * in + i0) / 2];  // in and i0 are multiples of 32
      const float* t = tables().e2m1;
      for (int64_t i = 0; i < n / 2; ++i) {
        w[2 * i] = t[c[i] & 0xF];
        w[2 * i + 1] = t[c[i] >> 4];
      }
      break;
    }
  }
}

void V41Linear::values_transposed(int64_t o0, int64_t rows, int64_t i0, int64_t n, float* tile, int64_t stride) const {
  if (kind == Kind::kFp4) {  // the bulk of the weights: decoded straight into the tile
    const float* t = tables().e2m1;
    for (int64_t j = 0; j < rows; ++j) {
      const uint8_t* c = &codes[((o0 + j) * in + i0) / 2];
      for (int64_t i = 0; i < n / 2; ++i) {
        tile[(2 * i) * stride + j] = t[c[i] & 0xF];
        tile[(2 * i + 1) * stride + j] = t[c[i] >> 4];
      }
    }
    return;
  }
  float w[kBlock];
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t k = std::min(kBlock, n - i);
      values(o0 + j, i0 + i, k, w);
      for (int64_t q = 0; q < k; ++q) tile[(i + q) * stride + j] = w[q];
    }
  }
}

float V41Linear::e8m0_value(uint8_t e) { return tables().e8m0[e]; }

int64_t V41Linear::bytes() const {
  return static_cast<int64_t>(4 * f32.size() + 2 * bf16.size() + codes.size() + scale.size()) +
         panels.resident_bytes();
}

bool V41Linear::pack_for_fast() {
  if (packed() || out == 0) return packed();
  for (uint8_t e : scale)
    if (!kernels::scale_in_kernel_range(e)) return false;
  Linear& p = panels;
  p.out = out;
  p.in = in;
  const auto pack_codes = [&](kernels::PanelFormat f, const uint8_t* stored, const uint8_t* row_scales) {
    p.code_panels.resize(kernels::packed_code_bytes(f, out, in));
    kernels::pack_stored_codes(f, stored, out, in, p.code_panels.data());
    if (!row_scales) return;
    p.scale_panels.resize(kernels::packed_scale_bytes(f, out, in));
    kernels::pack_row_scales(f, row_scales, out, in, p.scale_panels.data());
  };
  switch (kind) {
    case Kind::kF32:
      p.format = WeightFormat::kDense;
      p.panels.resize(kernels::packed_floats(out, in));
      kernels::pack_panels(f32.data(), out, in, p.panels.data());
      break;
    case Kind::kBf16:
      p.format = WeightFormat::kBf16;
      pack_codes(kernels::PanelFormat::kBf16, reinterpret_cast<const uint8_t*>(bf16.data()), nullptr);
      break;
    case Kind::kFp8: {
      // A tile's scale repeated for each of its rows.
      const int64_t blocks = in / kBlock;
      std::vector<uint8_t> row_scales(out * blocks);
      for (int64_t o = 0; o < out; ++o)
        std::copy_n(&scale[(o / kBlock) * blocks], blocks, &row_scales[o * blocks]);
      p.format = WeightFormat::kFp8Block32;
      pack_codes(kernels::PanelFormat::kFp8Block32, codes.data(), row_scales.data());
      break;
    }
    case Kind::kFp4:
      p.format = WeightFormat::kFp4Block;
      pack_codes(kernels::PanelFormat::kFp4, codes.data(), scale.data());
      break;
  }
  // FP8 / FP4 products take the input rounded as the reference's act_quant
  // does (per 32 inputs); wo_a's dequantized weight takes it as it is.
  p.round_input = block_scaled();
  p.input_block = kBlock;
  std::vector<float>().swap(f32);
  std::vector<uint16_t>().swap(bf16);
  ScratchVector<uint8_t>().swap(codes);
  std::vector<uint8_t>().swap(scale);
  return true;
}

int64_t V41Linear::held_bytes(Kind kind, int64_t out, int64_t in, bool packed) {
  if (packed) {
    using kernels::PanelFormat;
    const auto panels = [&](PanelFormat f) {
      return kernels::packed_code_bytes(f, out, in) + kernels::packed_scale_bytes(f, out, in);
    };
    switch (kind) {
      case Kind::kF32: return 4 * kernels::packed_floats(out, in);
      case Kind::kBf16: return panels(PanelFormat::kBf16);
      case Kind::kFp8: return panels(PanelFormat::kFp8Block32);
      case Kind::kFp4: return panels(PanelFormat::kFp4);
    }
  }
  switch (kind) {
    case Kind::kF32: return 4 * out * in;
    case Kind::kBf16: return 2 * out * in;
    case Kind::kFp8: return out * in + (out + kBlock - 1) / kBlock * (in / kBlock);
    case Kind::kFp4: return out * in / 2 + out * (in / kBlock);
  }
  return 0;
}

// Output rows are computed kRows at a time, one per lane of the
// accumulator arrays (kernels' v41_block): each lane adds its own products
// left to right, the order of the reference's scalar loop, so rows side by
// side give the same bits as one at a time while the adds no longer wait on
// each other. A tile holds one block of kBlock inputs of the group's rows,
// transposed.
constexpr int64_t kRows = kernels::kPanel;

void v41_linear(const V41Linear& l, const float* x, int64_t m, float* y) {
  if (m == 0) return;  // an empty forward (its buffers may be null)
  if (l.packed()) {
    linear_forward(kernels::kernels_for(kernels::Numerics::kFast), l.panels, x, m, y);
    return;
  }
  const int64_t in = l.in, out = l.out, blocks = (in + kBlock - 1) / kBlock;
  const bool scaled = l.block_scaled();
  std::vector<float> codes, scales;
  if (scaled) {
    codes.resize(m * in);
    scales.resize(m * blocks);
    for (int64_t r = 0; r < m; ++r) act_quant_e4m3(x + r * in, in, &codes[r * in], &scales[r * blocks]);
  }
  const float* a = scaled ? codes.data() : x;
  const int64_t groups = (out + kRows - 1) / kRows;
  // The block kernel's bits are the same on every ISA (exact numerics).
  const kernels::Kernels& k = kernels::kernels_for(kernels::Numerics::kExact);
  parallel_for(groups, 1, [&](int64_t g0, int64_t g1) {
    std::vector<float> acc(m * kRows), tile(kBlock * kRows), sx(m);
    float wscale[kRows];
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t o0 = g * kRows, rows = std::min(kRows, out - o0);
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(tile.begin(), tile.end(), 0.0f);
      std::fill(wscale, wscale + kRows, 1.0f);  // lanes past the last row compute padding
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t i0 = b * kBlock, n = std::min(kBlock, in - i0);
        l.values_transposed(o0, rows, i0, n, tile.data(), kRows);
        if (scaled) {
          for (int64_t j = 0; j < rows; ++j) wscale[j] = l.weight_scale(o0 + j, b);
          for (int64_t r = 0; r < m; ++r) sx[r] = scales[r * blocks + b];
        }
        k.v41_block(a + i0, in, m, tile.data(), n, sx.data(), scaled ? wscale : nullptr, acc.data());
      }
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < rows; ++j) y[r * out + o0 + j] = acc[r * kRows + j];
    }
  });
}

void v41_linear_columns(const V41Linear& l, Collectives* group, const float* x, int64_t m, float* y) {
  if (l.parts == 1) {
    v41_linear(l, x, m, y);
    return;
  }
  std::vector<float> mine(m * l.out);
  v41_linear(l, x, m, mine.data());
  gather_columns(group, TokenSplit::of(m, group), mine.data(), l.out, y);
}

void v41_linear_columns_to_rows(const V41Linear& l, Collectives* group, const TokenSplit& split, const float* x,
                                int64_t m, float* y) {
  if (l.parts == 1) {  // whole on every rank: only this rank's rows
    v41_linear(l, x + split.begin() * l.in, split.count(), y);
    return;
  }
  std::vector<float> mine(m * l.out);
  v41_linear(l, x, m, mine.data());
  columns_to_rows(group, split, mine.data(), l.out, y);
}

}  // namespace dsv4
