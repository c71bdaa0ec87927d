#include "model/compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"

namespace dsv4 {

namespace {

// Softmax over the window's slots per dimension, then the weighted kv sum.
// Slot s of dimension d reads kv[s*width + col(s) + d].
void pool(CompressorStateView st, const CompressorWeights& w, float* out) {
  const int r = w.ratio, d = w.head_dim;
  const int width = (w.overlap ? 2 : 1) * d;
  const int slots = w.overlap ? 2 * r : r;
  // With overlap the previous window (slots [0, r)) contributes its first
  // half of dims, the current window (slots [r, 2r)) its second half.
  auto col = [&](int s) { return w.overlap ? (s < r ? 0 : d) : 0; };
  // In the reference's order: softmax over the slots (exp, sum, divide),
  // then the weighted kv summed over the slots.
  std::vector<float> weighted(slots);
  for (int k = 0; k < d; ++k) {
    float mx = -INFINITY;
    for (int s = 0; s < slots; ++s) mx = std::fmax(mx, st.score[s * width + col(s) + k]);
    float sum = 0.0f;
    for (int s = 0; s < slots; ++s) sum += (weighted[s] = kernels::vexp(st.score[s * width + col(s) + k] - mx));
    for (int s = 0; s < slots; ++s) weighted[s] = weighted[s] / sum * st.kv[s * width + col(s) + k];
    out[k] = kernels::sum_outer(weighted.data(), slots, 1);
  }
}

}  // namespace

void compress_tokens(const CompressorWeights& w, const Rope& rope, int rope_dim, float norm_eps, bool qat_round,
                     const float* kv, const float* score, int64_t start_pos, int64_t n, CompressorStateView st,
                     const std::function<float*(int64_t)>& row_out) {
  const int r = w.ratio, d = w.head_dim;
  const int width = (w.overlap ? 2 : 1) * d;
  const int cur = w.overlap ? r : 0;  // first slot of the current window
  std::vector<float> pooled(d), cos(rope_dim / 2), sin(rope_dim / 2);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = start_pos + i;
    const int slot = cur + static_cast<int>(pos % r);
    std::memcpy(&st.kv[slot * width], kv + i * width, sizeof(float) * width);
    const float* ape = &w.ape[(pos % r) * width];
    for (int k = 0; k < width; ++k) st.score[slot * width + k] = score[i * width + k] + ape[k];
    if ((pos + 1) % r != 0) continue;

    pool(st, w, pooled.data());
    if (w.overlap) {  // this window becomes the next one's predecessor
      std::memmove(&st.kv[0], &st.kv[r * width], sizeof(float) * r * width);
      std::memmove(&st.score[0], &st.score[r * width], sizeof(float) * r * width);
    }
    float* row = row_out(pos / r);
    kernels::rms_norm(pooled.data(), w.norm.data(), d, norm_eps, row);
    rope.angles(pos + 1 - r, cos.data(), sin.data());
    kernels::rope(row + d - rope_dim, cos.data(), sin.data(), rope_dim / 2, false);
    if (w.rotate) {
      kernels::hadamard(row, d, pooled.data());
      kernels::fp4_quant_dequant(row, d, 32, qat_round);
    } else {
      kernels::fp8_quant_dequant(row, d - rope_dim, 64, qat_round);
    }
  }
}

}  // namespace dsv4
