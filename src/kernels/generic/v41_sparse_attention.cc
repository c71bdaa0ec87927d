// DeepSeek-V4.1's sparse_attn, one query row (semantics: dispatch.h), as
// its reference computes it head by head.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/generic/generic_kernels.h"

namespace dsv4::kernels {

namespace {
constexpr int64_t kAttnBlock = 64;  // sparse_attn's blocks of indices
}  // namespace

void generic::v41_sparse_attention(const float* q, int64_t heads, int64_t dim, const float* const* kv, int64_t n,
                                   const float* sinks, float scale, float* out) {
  std::vector<float> s(kAttnBlock), acc(dim);
  for (int64_t h = 0; h < heads; ++h) {
    const float* qh = q + h * dim;
    float running_max = -1e30f, sum_exp = 0.0f;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b0 = 0; b0 < n; b0 += kAttnBlock) {
      const int64_t blk = std::min(kAttnBlock, n - b0);
      float block_max = -INFINITY;
      for (int64_t j = 0; j < blk; ++j) {
        const float* k = kv[b0 + j];
        s[j] = k ? dot(qh, k, dim) * scale : -INFINITY;
        block_max = std::fmax(block_max, s[j]);
      }
      const float new_max = std::fmax(running_max, block_max);
      // torch.exp runs every element through the vector exp, tails included
      // (vml::vexp maps partial vectors too), so no element goes to libm.
      const float rescale = vexp(running_max - new_max);
      for (int64_t j = 0; j < blk; ++j) s[j] = vexp(s[j] - new_max);
      sum_exp = sum_exp * rescale + sum(s.data(), blk);
      for (int64_t d = 0; d < dim; ++d) {
        float pv = 0.0f;
        for (int64_t j = 0; j < blk; ++j) pv += s[j] * (kv[b0 + j] ? kv[b0 + j][d] : 0.0f);
        acc[d] = acc[d] * rescale + pv;
      }
      running_max = new_max;
    }
    sum_exp = sum_exp + vexp(sinks[h] - running_max);
    for (int64_t d = 0; d < dim; ++d) out[h * dim + d] = acc[d] / sum_exp;
  }
}

}  // namespace dsv4::kernels
