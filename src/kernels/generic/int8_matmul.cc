// W8A8: int8 weights with a scale per output channel against int8
// activations with a scale per row (dynamic, symmetric). Integer dot
// products are exact, so every ISA path gives the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/generic/generic_kernels.h"
#include "kernels/kernels.h"

namespace dsv4::kernels {

int64_t int8_padded_k(int64_t k) { return (k + 3) / 4 * 4; }

int64_t int8_code_bytes(int64_t n, int64_t k) { return (n + kPanel - 1) / kPanel * kPanel * int8_padded_k(k); }

int64_t int8_panel_extra_bytes(int64_t n) { return (n + kPanel - 1) / kPanel * kPanel * 8; }

void pack_int8_panels(const int8_t* codes, const float* channel_scales, int64_t n, int64_t k, uint8_t* packed_codes,
                      uint8_t* sums_and_scales) {
  const int64_t kp = int8_padded_k(k), panels = (n + kPanel - 1) / kPanel;
  std::fill_n(packed_codes, int8_code_bytes(n, k), 0);
  for (int64_t p = 0; p < panels; ++p) {
    int32_t sums[kPanel] = {};
    float scales[kPanel] = {};
    for (int64_t c = 0; c < kPanel; ++c) {
      const int64_t j = p * kPanel + c;
      if (j >= n) break;
      scales[c] = channel_scales[j];
      for (int64_t t = 0; t < k; ++t) {
        packed_codes[p * kPanel * kp + (t / 4) * kPanel * 4 + c * 4 + t % 4] = static_cast<uint8_t>(codes[j * k + t]);
        sums[c] += codes[j * k + t];
      }
    }
    std::memcpy(sums_and_scales + p * kPanel * 8, sums, sizeof sums);
    std::memcpy(sums_and_scales + p * kPanel * 8 + kPanel * 4, scales, sizeof scales);
  }
}

void generic::quantize_rows_int8(const float* x, int64_t m, int64_t k, uint8_t* biased, float* row_scales) {
  const int64_t kp = int8_padded_k(k);
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    float amax = 0.0f;
    for (int64_t t = 0; t < k; ++t) amax = std::fmax(amax, std::fabs(xi[t]));
    const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
    row_scales[i] = scale;
    uint8_t* out = biased + i * kp;
    for (int64_t t = 0; t < kp; ++t) {
      const float q = t < k ? std::nearbyint(std::fmin(127.0f, std::fmax(-127.0f, xi[t] / scale))) : 0.0f;
      out[t] = static_cast<uint8_t>(static_cast<int>(q) + 128);
    }
  }
}

void generic::matmul_int8(const uint8_t* biased, const float* row_scales, int64_t m, int64_t k, const Int8Panels& w,
                         int64_t n, int64_t p_begin, int64_t p_end, float* y, int64_t ldy) {
  const int64_t kp = int8_padded_k(k);
  for (int64_t p = p_begin; p < p_end; ++p) {
    const uint8_t* panel = w.codes + p * kPanel * kp;
    int32_t sums[kPanel];
    float scales[kPanel];
    std::memcpy(sums, w.sums_and_scales + p * kPanel * 8, sizeof sums);
    std::memcpy(scales, w.sums_and_scales + p * kPanel * 8 + kPanel * 4, sizeof scales);
    const int64_t cols = std::min(kPanel, n - p * kPanel);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c = 0; c < cols; ++c) {
        int32_t acc = 0;
        for (int64_t t = 0; t < kp; ++t)
          acc += static_cast<int32_t>(biased[i * kp + t]) *
                 static_cast<int8_t>(panel[(t / 4) * kPanel * 4 + c * 4 + t % 4]);
        acc -= 128 * sums[c];
        y[i * ldy + p * kPanel + c] = static_cast<float>(acc) * row_scales[i] * scales[c];
      }
    }
  }
}

}  // namespace dsv4::kernels
