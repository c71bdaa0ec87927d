// The packed-panel GEMM: layout, dispatch and the generic body.
#include <algorithm>
#include <cstring>

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

void matmul_packed_generic(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, int64_t p_begin,
                           int64_t p_end, float* y, int64_t ldy) {
  float acc[kPanel];
  for (int64_t p = p_begin; p < p_end; ++p) {
    const float* panel = packed + p * k * kPanel;
    const int64_t cols = std::min(kPanel, n - p * kPanel);
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * k;
      std::fill_n(acc, kPanel, 0.0f);
      for (int64_t t = 0; t < k; ++t)
        for (int64_t c = 0; c < kPanel; ++c) acc[c] += xi[t] * panel[t * kPanel + c];
      std::memcpy(y + i * ldy + p * kPanel, acc, sizeof(float) * cols);
    }
  }
}

void matmul_packed(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, int64_t p_begin,
                   int64_t p_end, float* y, int64_t ldy) {
  if (active_isa() == Isa::kAvx512) matmul_packed_avx512(x, m, k, packed, n, p_begin, p_end, y, ldy);
  else matmul_packed_generic(x, m, k, packed, n, p_begin, p_end, y, ldy);
}

}  // namespace dsv4::kernels
