#include "model/compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cache_rows.h"
#include "kernels/kernels.h"

namespace dsv4 {

namespace {

int64_t slot_of(int64_t pos, int64_t slots) { return (pos % slots + slots) % slots; }

// Softmax over the window's slots per dimension, then the weighted kv sum,
// for the window starting at position `first`. With overlap the previous
// window (its positions first - r ..) contributes its first half of dims,
// the window itself its second half, in the reference's slot order.
void pool(CompressorStateView st, const CompressorWeights& w, int64_t first, float* out) {
  const int r = w.ratio, d = w.head_dim;
  const int width = (w.overlap ? 2 : 1) * d;
  const int slots = w.overlap ? 2 * r : r;
  std::vector<int64_t> at(slots);  // offset of reference slot s in the ring
  for (int s = 0; s < slots; ++s) {
    const int64_t pos = w.overlap ? first - r + s : first + s;
    at[s] = slot_of(pos, st.slots) * width + (w.overlap && s >= r ? d : 0);
  }
  // In the reference's order: softmax over the slots (exp, sum, divide),
  // then the weighted kv summed over the slots.
  std::vector<float> weighted(slots);
  for (int k = 0; k < d; ++k) {
    float mx = -INFINITY;
    for (int s = 0; s < slots; ++s) mx = std::fmax(mx, st.score[at[s] + k]);
    float sum = 0.0f;
    for (int s = 0; s < slots; ++s) sum += (weighted[s] = kernels::vexp(st.score[at[s] + k] - mx));
    for (int s = 0; s < slots; ++s) weighted[s] = weighted[s] / sum * st.kv[at[s] + k];
    out[k] = kernels::sum_outer(weighted.data(), slots, 1);
  }
}

}  // namespace

void compress_tokens(const kernels::Kernels& k, const CompressorWeights& w, const Rope& rope, int rope_dim, float norm_eps, const float* kv,
                     const float* score, int64_t start_pos, int64_t n, CompressorStateView st, int64_t pooled_from,
                     const std::function<uint8_t*(int64_t)>& row_out) {
  const int r = w.ratio, d = w.head_dim;
  const int width = (w.overlap ? 2 : 1) * d;
  const kernels::KvRowFormat format{d - rope_dim, rope_dim};
  std::vector<float> pooled(d), row(d), cos(rope_dim / 2), sin(rope_dim / 2);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = start_pos + i;
    const int64_t slot = slot_of(pos, st.slots);
    std::memcpy(&st.kv[slot * width], kv + i * width, sizeof(float) * width);
    const float* ape = &w.ape[(pos % r) * width];
    for (int k = 0; k < width; ++k) st.score[slot * width + k] = score[i * width + k] + ape[k];
    if ((pos + 1) % r != 0 || pos < pooled_from) continue;

    pool(st, w, pos + 1 - r, pooled.data());
    kernels::rms_norm(pooled.data(), w.norm.data(), d, norm_eps, row.data());
    rope.angles(pos + 1 - r, cos.data(), sin.data());
    kernels::rope(row.data() + d - rope_dim, cos.data(), sin.data(), rope_dim / 2, false);
    if (w.rotate) {
      k.hadamard(row.data(), d, pooled.data());
      kernels::store_index_row(row.data(), d, row_out(pos / r));
    } else {
      k.store_kv_row(row.data(), format, row_out(pos / r));
    }
  }
}

}  // namespace dsv4
