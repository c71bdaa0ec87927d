#include "ops/linear.h"

#include <algorithm>

#include "base/check.h"
#include "base/thread_pool.h"
#include "kernels/dispatch.h"

namespace dsv4 {

void matmul(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y) {
  // Columns in multiples of 4 per task keep the kernel's 4-row blocking intact.
  int64_t groups = (n + 3) / 4;
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, m * k / 4));
  parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
    kernels::matmul_nt(x, m, k, w, g0 * 4, std::min(n, g1 * 4), y, n);
  });
}

namespace {

kernels::PanelFormat panel_format(WeightFormat f) {
  switch (f) {
    case WeightFormat::kBf16: return kernels::PanelFormat::kBf16;
    case WeightFormat::kFp8Block: return kernels::PanelFormat::kFp8;
    case WeightFormat::kFp4Block: return kernels::PanelFormat::kFp4;
    case WeightFormat::kFp8Block32: return kernels::PanelFormat::kFp8Block32;
    case WeightFormat::kDense:
    case WeightFormat::kInt8Channel: break;
  }
  return kernels::PanelFormat::kF32;
}

}  // namespace

void Linear::pack() {
  if (format == WeightFormat::kInt8Channel && !codes.empty()) {
    code_panels.resize(kernels::int8_code_bytes(out, in));
    scale_panels.resize(kernels::int8_panel_extra_bytes(out));
    kernels::pack_int8_panels(reinterpret_cast<const int8_t*>(codes.data()), channel_scales.data(), out, in,
                              code_panels.data(), scale_panels.data());
    std::vector<uint8_t>().swap(codes);
    std::vector<float>().swap(channel_scales);
    return;
  }
  if (!codes.empty()) {
    const kernels::PanelFormat f = panel_format(format);
    code_panels.resize(kernels::packed_code_bytes(f, out, in));
    scale_panels.resize(kernels::packed_scale_bytes(f, out, in));
    kernels::pack_quantized_panels(f, codes.data(), scales.data(), out, in, code_panels.data(), scale_panels.data());
    std::vector<uint8_t>().swap(codes);
    std::vector<uint8_t>().swap(scales);
    return;
  }
  if (w.empty()) return;  // already packed (or empty)
  panels.resize(kernels::packed_floats(out, in));
  kernels::pack_panels(w.data(), out, in, panels.data());
  std::vector<float>().swap(w);
}

void linear_panels(const kernels::Kernels& k, const Linear& l, const float* x, int64_t m, int64_t p_begin,
                   int64_t p_end, float* y, int64_t ldy) {
  if (l.code_panels.empty()) return k.matmul_f32(x, m, l.in, l.panels.data(), l.out, p_begin, p_end, y, ldy);
  const kernels::QuantizedPanels q{panel_format(l.format), l.code_panels.data(), l.scale_panels.data()};
  k.matmul_quantized(x, m, l.in, q, l.out, p_begin, p_end, y, ldy);
}

namespace {

// y[m, out] = x W^T on the packed panels, split over the thread pool by
// panels. pairs: x as BF16 pairs (exact BF16 inputs to FP8/FP4 panels).
void matmul_panels(const kernels::Kernels& k, const Linear& l, const float* x, const uint32_t* pairs, int64_t m,
                   float* y) {
  const int64_t panels = (l.out + kernels::kPanel - 1) / kernels::kPanel;
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, m * l.in / 16));
  const kernels::QuantizedPanels q{panel_format(l.format), l.code_panels.data(), l.scale_panels.data()};
  parallel_for(panels, grain, [&](int64_t p0, int64_t p1) {
    if (pairs) k.matmul_quantized_pairs(pairs, m, l.in, q, l.out, p0, p1, y, l.out);
    else linear_panels(k, l, x, m, p0, p1, y, l.out);
  });
}

// W8A8: the rows quantized to int8, then integer panels.
void int8_forward(const kernels::Kernels& k, const Linear& l, const float* x, int64_t m, float* y) {
  const int64_t kp = kernels::int8_padded_k(l.in);
  std::vector<uint8_t> biased(m * kp);
  std::vector<float> row_scales(m);
  parallel_for(m, 8, [&](int64_t r0, int64_t r1) {
    k.quantize_rows_int8(x + r0 * l.in, r1 - r0, l.in, biased.data() + r0 * kp, row_scales.data() + r0);
  });
  const int64_t panels = (l.out + kernels::kPanel - 1) / kernels::kPanel;
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, m * l.in / 16));
  const kernels::Int8Panels w{l.code_panels.data(), l.scale_panels.data()};
  parallel_for(panels, grain, [&](int64_t p0, int64_t p1) {
    k.matmul_int8(biased.data(), row_scales.data(), m, l.in, w, l.out, p0, p1, y, l.out);
  });
}

}  // namespace

void linear_forward(const kernels::Kernels& k, const Linear& layer, const float* x, int64_t m, float* y) {
  if (layer.format == WeightFormat::kInt8Channel) {
    DSV4_CHECK_MSG(!layer.code_panels.empty() && layer.round_input,
                   "a W8A8 linear is used before it is packed, or without input quantization");
    int8_forward(k, layer, x, m, y);
    return;
  }
  const bool packed = !layer.panels.empty() || !layer.code_panels.empty();
  DSV4_CHECK_MSG(packed || static_cast<int64_t>(layer.w.size()) == layer.out * layer.in,
                 "a linear layer is used before it is packed");
  const float* in = x;
  std::vector<float> xq;
  std::vector<uint32_t> pairs;
  // Rounded inputs are e4m3 values times powers of two: exact in BF16, so
  // FP8/FP4 panels take them as BF16 pairs.
  const bool as_pairs = layer.quantizes_input() && (layer.format == WeightFormat::kFp8Block ||
                                                     layer.format == WeightFormat::kFp4Block ||
                                                     layer.format == WeightFormat::kFp8Block32) &&
                        !layer.code_panels.empty();
  if (layer.quantizes_input()) {
    DSV4_CHECK(layer.in % layer.input_block == 0);
    xq.assign(x, x + m * layer.in);
    if (as_pairs) pairs.resize(m * layer.in / 2);
    parallel_for(m, 8, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        k.fp8_round_trip(xq.data() + r * layer.in, layer.in, layer.input_block);
        if (as_pairs) kernels::pack_bf16_pairs(xq.data() + r * layer.in, 1, layer.in, pairs.data() + r * layer.in / 2);
      }
    });
    in = xq.data();
  }
  if (packed) matmul_panels(k, layer, in, as_pairs ? pairs.data() : nullptr, m, y);
  else matmul(in, m, layer.in, layer.w.data(), layer.out, y);
}

}  // namespace dsv4
