// The packed-panel GEMM: layout, dispatch and the generic body.
#include <algorithm>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "kernels/isa.h"
#include "kernels/kernels.h"

namespace dsv4::kernels {

void pack_panels(const float* w, int64_t n, int64_t k, float* packed) {
  const int64_t panels = (n + kPanel - 1) / kPanel;
  for (int64_t p = 0; p < panels; ++p) {
    float* dst = packed + p * k * kPanel;
    for (int64_t t = 0; t < k; ++t)
      for (int64_t c = 0; c < kPanel; ++c) {
        const int64_t j = p * kPanel + c;
        dst[t * kPanel + c] = j < n ? w[j * k + t] : 0.0f;
      }
  }
}

namespace {

// One f32 panel [k][kPanel] (panel index p) against every row: each output
// adds its products left to right.
void panel_product(const float* x, int64_t m, int64_t k, const float* panel, int64_t n, int64_t p, float* y,
                   int64_t ldy) {
  float acc[kPanel];
  const int64_t cols = std::min(kPanel, n - p * kPanel);
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    std::fill_n(acc, kPanel, 0.0f);
    for (int64_t t = 0; t < k; ++t)
      for (int64_t c = 0; c < kPanel; ++c) acc[c] += xi[t] * panel[t * kPanel + c];
    std::memcpy(y + i * ldy + p * kPanel, acc, sizeof(float) * cols);
  }
}

}  // namespace

void matmul_packed_generic(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, int64_t p_begin,
                           int64_t p_end, float* y, int64_t ldy) {
  for (int64_t p = p_begin; p < p_end; ++p) panel_product(x, m, k, packed + p * k * kPanel, n, p, y, ldy);
}

int64_t panel_block(PanelFormat f) { return f == PanelFormat::kFp8 ? 128 : 32; }

namespace {

int64_t panel_count(int64_t n) { return (n + kPanel - 1) / kPanel; }
int64_t scale_blocks(PanelFormat f, int64_t k) {
  return f == PanelFormat::kBf16 ? 0 : (k + panel_block(f) - 1) / panel_block(f);
}
int64_t code_bytes_per_step(PanelFormat f) {
  return f == PanelFormat::kBf16 ? 2 * kPanel : f == PanelFormat::kFp8 ? kPanel : kPanel / 2;
}

// Weight (t, column c) of panel p, dequantized.
float panel_weight(const QuantizedPanels& w, int64_t k, int64_t p, int64_t t, int64_t c) {
  if (w.format == PanelFormat::kBf16) {
    uint16_t v;
    std::memcpy(&v, w.codes + ((p * k + t) * kPanel + c) * 2, 2);
    return bf16_to_f32(v);
  }
  const uint8_t scale = w.scales[(p * scale_blocks(w.format, k) + t / panel_block(w.format)) * kPanel + c];
  if (w.format == PanelFormat::kFp8) return e4m3_to_f32(w.codes[(p * k + t) * kPanel + c]) * e8m0_to_f32(scale);
  const uint8_t byte = w.codes[(p * k + t) * (kPanel / 2) + c / 2];
  return e2m1_to_f32((c & 1) ? byte >> 4 : byte & 0xF) * e8m0_to_f32(scale);
}

}  // namespace

int64_t packed_code_bytes(PanelFormat f, int64_t n, int64_t k) { return panel_count(n) * k * code_bytes_per_step(f); }

int64_t packed_scale_bytes(PanelFormat f, int64_t n, int64_t k) { return panel_count(n) * scale_blocks(f, k) * kPanel; }

void pack_quantized_panels(PanelFormat f, const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k,
                           uint8_t* packed_codes, uint8_t* packed_scales) {
  const int64_t blocks = scale_blocks(f, k), step = code_bytes_per_step(f);
  for (int64_t p = 0; p < panel_count(n); ++p) {
    for (int64_t t = 0; t < k; ++t) {
      uint8_t* dst = packed_codes + (p * k + t) * step;
      std::fill_n(dst, step, 0);
      for (int64_t c = 0; c < kPanel; ++c) {
        const int64_t j = p * kPanel + c;
        if (f == PanelFormat::kBf16) {
          if (j < n) std::memcpy(dst + 2 * c, codes + (j * k + t) * 2, 2);  // padding: +0
          continue;
        }
        const uint8_t code = j < n ? codes[j * k + t] : 0;  // padding: +0
        if (f == PanelFormat::kFp8) dst[c] = code;
        else dst[c / 2] |= static_cast<uint8_t>((code & 0xF) << ((c & 1) * 4));
      }
    }
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t c = 0; c < kPanel; ++c) {
        const int64_t j = p * kPanel + c;
        packed_scales[(p * blocks + b) * kPanel + c] = j < n ? scales[j * blocks + b] : 127;  // padding: 1.0
      }
  }
}

void matmul_quantized_generic(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n,
                              int64_t p_begin, int64_t p_end, float* y, int64_t ldy) {
  std::vector<float> panel(k * kPanel);  // the panel dequantized
  for (int64_t p = p_begin; p < p_end; ++p) {
    for (int64_t t = 0; t < k; ++t)
      for (int64_t c = 0; c < kPanel; ++c) panel[t * kPanel + c] = panel_weight(w, k, p, t, c);
    panel_product(x, m, k, panel.data(), n, p, y, ldy);
  }
}

void matmul_quantized(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                      int64_t p_end, float* y, int64_t ldy) {
  if (active_isa() == Isa::kAvx512) matmul_quantized_avx512(x, m, k, w, n, p_begin, p_end, y, ldy);
  else matmul_quantized_generic(x, m, k, w, n, p_begin, p_end, y, ldy);
}

void matmul_packed(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, int64_t p_begin,
                   int64_t p_end, float* y, int64_t ldy) {
  if (active_isa() == Isa::kAvx512) matmul_packed_avx512(x, m, k, packed, n, p_begin, p_end, y, ldy);
  else matmul_packed_generic(x, m, k, packed, n, p_begin, p_end, y, ldy);
}

}  // namespace dsv4::kernels
