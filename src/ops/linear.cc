#include "ops/linear.h"

#include <algorithm>

#include "base/check.h"
#include "base/thread_pool.h"
#include "base/work_meter.h"
#include "kernels/dispatch.h"

namespace dsv4 {

void matmul(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y) {
  // Columns in multiples of 4 per task keep the kernel's 4-row blocking intact.
  int64_t groups = (n + 3) / 4;
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, m * k / 4));
  parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
    const int64_t c1 = std::min(n, g1 * 4);
    meter_read(w + g0 * 4 * k, (c1 - g0 * 4) * k * static_cast<int64_t>(sizeof(float)));
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

namespace {

// Panels p0..p1 of a buffer holding `panels` panels of equal size.
void meter_panels(const void* data, int64_t bytes, int64_t panels, int64_t p0, int64_t p1) {
  if (bytes == 0 || !WorkMeter::current()) return;
  const int64_t each = bytes / panels;
  meter_read(static_cast<const uint8_t*>(data) + p0 * each, (p1 - p0) * each);
}

// The weight bytes panels p0..p1 of `l` stream, for the machine simulator.
void meter_linear(const Linear& l, int64_t p0, int64_t p1) {
  const int64_t panels = (l.out + kernels::kPanel - 1) / kernels::kPanel;
  meter_panels(l.panels.data(), static_cast<int64_t>(sizeof(float) * l.panels.size()), panels, p0, p1);
  meter_panels(l.code_panels.data(), static_cast<int64_t>(l.code_panels.size()), panels, p0, p1);
  meter_panels(l.scale_panels.data(), static_cast<int64_t>(l.scale_panels.size()), panels, p0, p1);
}

}  // namespace

void linear_panels(const kernels::Kernels& k, const Linear& l, const float* x, int64_t m, int64_t p_begin,
                   int64_t p_end, float* y, int64_t ldy) {
  meter_linear(l, p_begin, p_end);
  if (l.code_panels.empty()) return k.matmul_f32(x, m, l.in, l.panels.data(), l.out, p_begin, p_end, y, ldy);
  const kernels::QuantizedPanels q{panel_format(l.format), l.code_panels.data(), l.scale_panels.data()};
  k.matmul_quantized(x, m, l.in, q, l.out, p_begin, p_end, y, ldy);
}

namespace {

// Tiles a product aims for: 4 for each of a 64-core node's workers.
constexpr int64_t kTargetTiles = 256;

// Panels a tile takes at least: enough multiply-adds (8K, 32 KB of f32
// weights) that handing it to a worker costs little next to streaming it,
// and no more, so that a decode step's linears (one row, hundreds to
// thousands of inputs) split into single panels.
int64_t panels_per_tile(int64_t m, int64_t in) {
  return std::max<int64_t>(1, (int64_t{1} << 13) / std::max<int64_t>(1, m * in * kernels::kPanel));
}

// How a product y[m, out] = x W^T splits into tiles of rows x panels for
// many threads. Each output's sum stays whole (split along the inputs, the
// sums would change in fast numerics enough to move the DSpark goldens
// past their bounds), so a layer has at most one tile a panel a row block.
// Rows split only into blocks of 32 or more (a prefill chunk): a row's
// result does not depend on its block.
struct Tiling {
  int64_t panels = 1, row_blocks = 1, rows_per = 1;
  int64_t tiles() const { return row_blocks * panels; }
};

Tiling tiling_of(const Linear& l, int64_t m) {
  Tiling t;
  t.panels = (l.out + kernels::kPanel - 1) / kernels::kPanel;
  t.row_blocks = std::clamp<int64_t>((kTargetTiles + t.panels - 1) / t.panels, 1, std::max<int64_t>(1, m / 32));
  t.rows_per = (m + t.row_blocks - 1) / t.row_blocks;
  return t;
}

// Calls fn(r0, r1, p0, p1) over every tile of t for m rows: rows [r0, r1)
// and panels [p0, p1); a task takes whole runs of panels of one row block.
template <class Fn>
void for_each_tile(const Tiling& t, int64_t m, int64_t grain, Fn&& fn) {
  parallel_for(t.tiles(), grain, [&](int64_t a, int64_t b) {
    while (a < b) {
      const int64_t rb = a / t.panels, p0 = a % t.panels, p1 = std::min(t.panels, p0 + (b - a));
      fn(rb * t.rows_per, std::min(m, (rb + 1) * t.rows_per), p0, p1);
      a += p1 - p0;
    }
  });
}

// y[m, out] = x W^T on the packed panels, split over the thread pool into
// tiles. pairs: x as BF16 pairs (exact BF16 inputs to FP8/FP4 panels).
void matmul_panels(const kernels::Kernels& k, const Linear& l, const float* x, const uint32_t* pairs, int64_t m,
                   float* y) {
  const Tiling t = tiling_of(l, m);
  const kernels::QuantizedPanels q{panel_format(l.format), l.code_panels.data(), l.scale_panels.data()};
  for_each_tile(t, m, panels_per_tile(t.rows_per, l.in), [&](int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
    if (pairs) {
      meter_linear(l, p0, p1);
      k.matmul_quantized_pairs(pairs + r0 * l.in / 2, r1 - r0, l.in, q, l.out, p0, p1, y + r0 * l.out, l.out);
    } else {
      linear_panels(k, l, x + r0 * l.in, r1 - r0, p0, p1, y + r0 * l.out, l.out);
    }
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
  const Tiling t = tiling_of(l, m);
  const kernels::Int8Panels w{l.code_panels.data(), l.scale_panels.data()};
  for_each_tile(t, m, panels_per_tile(t.rows_per, l.in), [&](int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
    meter_linear(l, p0, p1);
    k.matmul_int8(biased.data() + r0 * kp, row_scales.data() + r0, r1 - r0, l.in, w, l.out, p0, p1, y + r0 * l.out,
                  l.out);
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
