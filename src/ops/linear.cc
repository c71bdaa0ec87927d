#include "ops/linear.h"

#include <algorithm>

#include "base/check.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"

namespace dsv4 {

void matmul(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y) {
  // Columns in multiples of 4 per task keep the kernel's 4-row blocking intact.
  int64_t groups = (n + 3) / 4;
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, m * k / 4));
  parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
    kernels::matmul_nt(x, m, k, w, g0 * 4, std::min(n, g1 * 4), y, n);
  });
}

void linear_forward(const Linear& layer, const float* x, int64_t m, float* y) {
  DSV4_CHECK(static_cast<int64_t>(layer.w.size()) == layer.out * layer.in);
  if (!layer.quantizes_input()) {
    matmul(x, m, layer.in, layer.w.data(), layer.out, y);
    return;
  }
  DSV4_CHECK(layer.in % 128 == 0);
  std::vector<float> xq(x, x + m * layer.in);
  parallel_for(m, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) kernels::fp8_quant_dequant(xq.data() + r * layer.in, layer.in, 128, /*round=*/true);
  });
  matmul(xq.data(), m, layer.in, layer.w.data(), layer.out, y);
}

}  // namespace dsv4
