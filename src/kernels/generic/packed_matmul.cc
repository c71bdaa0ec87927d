// The packed-panel GEMM: layout, dispatch and the generic body.
#include <algorithm>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "kernels/generic/generic_kernels.h"
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

void generic::matmul_f32(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, int64_t p_begin,
                         int64_t p_end, float* y, int64_t ldy) {
  for (int64_t p = p_begin; p < p_end; ++p) panel_product(x, m, k, packed + p * k * kPanel, n, p, y, ldy);
}

int64_t panel_block(PanelFormat f) { return f == PanelFormat::kFp8 ? 128 : 32; }  // FP4 and kFp8Block32: 32

int64_t chunk_steps(PanelFormat f) { return is_fp8(f) ? 4 : f == PanelFormat::kFp4 ? 8 : 1; }

CodePosition code_position(PanelFormat f, int64_t k, int64_t p, int64_t t, int64_t c) {
  if (f == PanelFormat::kBf16) return {((p * k + t) * kPanel + c) * 2, 0};
  // Pair group g of the chunk: word 2c + 1 holds step 2g (added first by
  // the dot product), word 2c step 2g + 1.
  const int64_t steps = chunk_steps(f), in_chunk = t % steps, group = in_chunk / 2;
  const int64_t word = 2 * c + (in_chunk % 2 == 0 ? 1 : 0), chunk = (p * k + t - in_chunk) / steps * kChunkBytes;
  if (f == PanelFormat::kFp4) {
    // Group g's codes are nibble g of the 32 words (bits 4g..4g+3), so one
    // 16-bit table permute per group decodes them in place.
    return {chunk + 2 * word + group / 2, static_cast<int>(group % 2)};
  }
  // FP8: words 8L..8L+7 come from bytes 16L..16L+7 (group 0) or
  // 16L+8..16L+15 (group 1) of the chunk, the order in which byte
  // unpacking interleaves 128-bit lanes.
  return {chunk + 16 * (word / 8) + 8 * (group % 2) + word % 8, 0};
}

namespace {

int64_t panel_count(int64_t n) { return (n + kPanel - 1) / kPanel; }
int64_t scale_blocks(PanelFormat f, int64_t k) {
  return f == PanelFormat::kBf16 ? 0 : (k + panel_block(f) - 1) / panel_block(f);
}

}  // namespace

float panel_weight(const QuantizedPanels& w, int64_t k, int64_t p, int64_t t, int64_t c) {
  const CodePosition at = code_position(w.format, k, p, t, c);
  if (w.format == PanelFormat::kBf16) {
    uint16_t v;
    std::memcpy(&v, w.codes + at.byte, 2);
    return bf16_to_f32(v);
  }
  const uint8_t scale = w.scales[(p * scale_blocks(w.format, k) + t / panel_block(w.format)) * kPanel + c];
  if (is_fp8(w.format)) return e4m3_to_f32(w.codes[at.byte]) * e8m0_to_f32(scale);
  return e2m1_to_f32((w.codes[at.byte] >> (4 * at.nibble)) & 0xF) * e8m0_to_f32(scale);
}

int64_t packed_code_bytes(PanelFormat f, int64_t n, int64_t k) {
  const int64_t per_step = f == PanelFormat::kBf16 ? 2 * kPanel : is_fp8(f) ? kPanel : kPanel / 2;
  return panel_count(n) * k * per_step;
}

int64_t packed_scale_bytes(PanelFormat f, int64_t n, int64_t k) { return panel_count(n) * scale_blocks(f, k) * kPanel; }

bool scale_in_kernel_range(uint8_t e8m0) {
  // A code times its scale must stay a normal number for the exponent
  // addition the kernels use: codes span 2^-9..448 (FP8) and 0.5..6 (FP4).
  const int e = static_cast<int>(e8m0) - 127;
  return e >= -117 && e <= 118;
}

void pack_quantized_panels(PanelFormat f, const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k,
                           uint8_t* packed_codes, uint8_t* packed_scales) {
  std::fill_n(packed_codes, packed_code_bytes(f, n, k), 0);  // padding columns: +0
  for (int64_t p = 0; p < panel_count(n); ++p) {
    for (int64_t c = 0; c < kPanel; ++c) {
      const int64_t j = p * kPanel + c;
      if (j >= n) break;
      for (int64_t t = 0; t < k; ++t) {
        const CodePosition at = code_position(f, k, p, t, c);
        if (f == PanelFormat::kBf16) std::memcpy(packed_codes + at.byte, codes + (j * k + t) * 2, 2);
        else if (is_fp8(f)) packed_codes[at.byte] = codes[j * k + t];
        else packed_codes[at.byte] |= static_cast<uint8_t>((codes[j * k + t] & 0xF) << (4 * at.nibble));
      }
    }
  }
  pack_row_scales(f, scales, n, k, packed_scales);
}

namespace {

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void store_u16(uint8_t* p, uint32_t v) {
  const uint16_t h = static_cast<uint16_t>(v);
  std::memcpy(p, &h, 2);
}

// Nibbles 0, 2, 4 and 6 of x as one 16-bit word, nibble 0 lowest.
uint32_t even_nibbles(uint32_t x) {
  uint32_t v = x & 0x0F0F0F0Fu;
  v = (v | (v >> 4)) & 0x00FF00FFu;
  return (v | (v >> 8)) & 0xFFFFu;
}

}  // namespace

void pack_stored_codes(PanelFormat f, const uint8_t* stored, int64_t n, int64_t k, uint8_t* packed_codes) {
  const int64_t panels = panel_count(n), panel_bytes = packed_code_bytes(f, kPanel, k);
  if (n % kPanel) std::fill_n(packed_codes + (panels - 1) * panel_bytes, panel_bytes, 0);  // padding columns: +0
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t cols = std::min(kPanel, n - p * kPanel);
    if (f == PanelFormat::kBf16) {
      uint8_t* dst = packed_codes + p * k * kPanel * 2;
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t* row = stored + (p * kPanel + c) * k * 2;
        for (int64_t t = 0; t < k; ++t) std::memcpy(dst + (t * kPanel + c) * 2, row + 2 * t, 2);
      }
    } else if (is_fp8(f)) {
      // Column c's steps (s0..s3) of a chunk: words (s1, s0) and (s3, s2) of
      // lane c / 4 (code_position).
      for (int64_t t = 0; t < k; t += 4) {
        uint8_t* chunk = packed_codes + (p * k + t) / 4 * kChunkBytes;
        for (int64_t c = 0; c < cols; ++c) {
          const uint32_t x = load_u32(stored + (p * kPanel + c) * k + t);
          uint8_t* at = chunk + 16 * (c / 4) + 2 * (c % 4);
          store_u16(at, ((x >> 8) & 0xFF) | ((x & 0xFF) << 8));
          store_u16(at + 8, ((x >> 24) & 0xFF) | (((x >> 16) & 0xFF) << 8));
        }
      }
    } else if (f == PanelFormat::kFp4) {
      // Column c's 8 steps of a chunk: its even steps in word 2c + 1, its odd
      // ones in word 2c, step 2g (or 2g + 1) in nibble g (code_position).
      for (int64_t t = 0; t < k; t += 8) {
        uint8_t* chunk = packed_codes + (p * k + t) / 8 * kChunkBytes;
        for (int64_t c = 0; c < cols; ++c) {
          const uint32_t x = load_u32(stored + (p * kPanel + c) * (k / 2) + t / 2);
          store_u16(chunk + 2 * (2 * c + 1), even_nibbles(x));
          store_u16(chunk + 2 * (2 * c), even_nibbles(x >> 4));
        }
      }
    }
  }
}

void pack_row_scales(PanelFormat f, const uint8_t* scales, int64_t n, int64_t k, uint8_t* packed_scales) {
  const int64_t blocks = scale_blocks(f, k);
  for (int64_t p = 0; p < panel_count(n); ++p)
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t c = 0; c < kPanel; ++c) {
        const int64_t j = p * kPanel + c;
        packed_scales[(p * blocks + b) * kPanel + c] = j < n ? scales[j * blocks + b] : 127;  // padding: 1.0
      }
}

void generic::matmul_quantized(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n,
                               int64_t p_begin, int64_t p_end, float* y, int64_t ldy) {
  std::vector<float> panel(k * kPanel);  // the panel dequantized
  for (int64_t p = p_begin; p < p_end; ++p) {
    for (int64_t t = 0; t < k; ++t)
      for (int64_t c = 0; c < kPanel; ++c) panel[t * kPanel + c] = panel_weight(w, k, p, t, c);
    panel_product(x, m, k, panel.data(), n, p, y, ldy);
  }
}

void pack_bf16_pairs(const float* x, int64_t m, int64_t k, uint32_t* pairs) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t t = 0; t < k; t += 2) {
      uint32_t first, second;
      std::memcpy(&first, x + i * k + t, 4);
      std::memcpy(&second, x + i * k + t + 1, 4);
      pairs[(i * k + t) / 2] = (first & 0xFFFF0000u) | (second >> 16);
    }
}

void generic::matmul_quantized_pairs(const uint32_t* pairs, int64_t m, int64_t k, const QuantizedPanels& w,
                                     int64_t n, int64_t p_begin, int64_t p_end, float* y, int64_t ldy) {
  std::vector<float> x(m * k);
  for (int64_t i = 0; i < m * k; i += 2) {
    const uint32_t first = pairs[i / 2] & 0xFFFF0000u, second = pairs[i / 2] << 16;
    std::memcpy(&x[i], &first, 4);
    std::memcpy(&x[i + 1], &second, 4);
  }
  generic::matmul_quantized(x.data(), m, k, w, n, p_begin, p_end, y, ldy);
}

}  // namespace dsv4::kernels
