#include "model/compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "model/cache_geometry.h"

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
  const int64_t ring = CacheGeometry::compressor_slots(r);
  std::vector<int64_t> at(slots);  // offset of reference slot s in the ring
  for (int s = 0; s < slots; ++s) {
    const int64_t pos = w.overlap ? first - r + s : first + s;
    at[s] = slot_of(pos, ring) * width + (w.overlap && s >= r ? d : 0);
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

// Ring offsets of the slots holding the window before `boundary` (the
// predecessor the next window reads): a block's tail is their first halves,
// [kv, score] x [ratio, head_dim].
std::vector<int64_t> tail_offsets(int ratio, int64_t d, int64_t boundary) {
  const int64_t ring = CacheGeometry::compressor_slots(ratio);
  std::vector<int64_t> at(ratio);
  for (int s = 0; s < ratio; ++s) at[s] = slot_of(boundary - ratio + s, ring) * 2 * d;
  return at;
}

}  // namespace

void restore_compressor_tail(int ratio, int64_t head_dim, CompressorStateView st, int64_t boundary,
                             const float* tail) {
  const std::vector<int64_t> at = tail_offsets(ratio, head_dim, boundary);
  for (int s = 0; s < ratio; ++s) {
    std::memcpy(&st.kv[at[s]], tail + s * head_dim, sizeof(float) * head_dim);
    std::memcpy(&st.score[at[s]], tail + (ratio + s) * head_dim, sizeof(float) * head_dim);
  }
}

void compress_tokens(const CompressorWeights& w, const Rope& rope, int rope_dim, float norm_eps, bool qat_round,
                     const float* kv, const float* score, int64_t start_pos, int64_t n, CompressorStateView st,
                     const std::function<float*(int64_t)>& row_out, const std::function<float*(int64_t)>& tail_out) {
  const int r = w.ratio, d = w.head_dim;
  const int width = (w.overlap ? 2 : 1) * d;
  const int64_t ring = CacheGeometry::compressor_slots(r);
  std::vector<float> pooled(d), cos(rope_dim / 2), sin(rope_dim / 2);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = start_pos + i;
    const int64_t slot = slot_of(pos, ring);
    std::memcpy(&st.kv[slot * width], kv + i * width, sizeof(float) * width);
    const float* ape = &w.ape[(pos % r) * width];
    for (int k = 0; k < width; ++k) st.score[slot * width + k] = score[i * width + k] + ape[k];
    if (w.overlap && tail_out && (pos + 1) % kBlockTokens == 0) {
      if (float* tail = tail_out((pos + 1) / kBlockTokens - 1)) {
        const std::vector<int64_t> at = tail_offsets(r, d, pos + 1);
        for (int s = 0; s < r; ++s) {
          std::memcpy(tail + s * d, &st.kv[at[s]], sizeof(float) * d);
          std::memcpy(tail + (r + s) * d, &st.score[at[s]], sizeof(float) * d);
        }
      }
    }
    if ((pos + 1) % r != 0) continue;

    pool(st, w, pos + 1 - r, pooled.data());
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
