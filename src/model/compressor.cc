#include "model/compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/thread_pool.h"
#include "kernels/cache_rows.h"
#include "kernels/kernels.h"

namespace dsv4 {

namespace {

int64_t slot_of(int64_t pos, int64_t slots) { return (pos % slots + slots) % slots; }

// Where position pos's kv and score (with its ape added) are: this call's
// inputs from start_pos on, the state's ring before it.
struct TokenRows {
  const CompressorWeights& w;
  CompressorStateView st;
  const float* kv;
  const float* score;
  int64_t start_pos;
  int width;
  float kv_at(int64_t pos, int k) const {
    return pos >= start_pos ? kv[(pos - start_pos) * width + k] : st.kv[slot_of(pos, st.slots) * width + k];
  }
  float score_at(int64_t pos, int k) const {
    if (pos < start_pos) return st.score[slot_of(pos, st.slots) * width + k];
    return score[(pos - start_pos) * width + k] + w.ape[(pos % w.ratio) * width + k];
  }
};

// Softmax over the window's slots per dimension, then the weighted kv sum,
// for the window starting at position `first`, dimensions [k0, k1) of it
// (each dimension is its own). With overlap the previous window (its
// positions first - r ..) contributes its first half of dims, the window
// itself its second half, in the reference's slot order.
void pool(const TokenRows& rows, int64_t first, int k0, int k1, float* out) {
  const CompressorWeights& w = rows.w;
  const int r = w.ratio, d = w.head_dim;
  const int slots = w.overlap ? 2 * r : r;
  thread_local std::vector<int64_t> pos;
  thread_local std::vector<int> dim0;  // where slot s's dims start in its token's row
  thread_local std::vector<float> score, weighted;
  pos.resize(slots);
  dim0.resize(slots);
  score.resize(slots);
  weighted.resize(slots);
  for (int s = 0; s < slots; ++s) {
    pos[s] = w.overlap ? first - r + s : first + s;
    dim0[s] = w.overlap && s >= r ? d : 0;
  }
  // In the reference's order: softmax over the slots (exp, sum, divide),
  // then the weighted kv summed over the slots.
  for (int k = k0; k < k1; ++k) {
    float mx = -INFINITY;
    for (int s = 0; s < slots; ++s) mx = std::fmax(mx, score[s] = rows.score_at(pos[s], dim0[s] + k));
    float sum = 0.0f;
    for (int s = 0; s < slots; ++s) sum += (weighted[s] = kernels::vexp(score[s] - mx));
    for (int s = 0; s < slots; ++s) weighted[s] = weighted[s] / sum * rows.kv_at(pos[s], dim0[s] + k);
    out[k] = kernels::sum_outer(weighted.data(), slots, 1);
  }
}

// A window's dimensions pool in pieces when the windows are too few to
// keep the pool busy: a decode step completes one at most, and pooled
// whole it was tens of microseconds on the rank's thread (an exponential a
// slot and dimension, 4K of them at ratio 4). As many pieces a window as
// give each thread one, halving the window while the pieces stay whole
// and at least kLeastPoolPiece dimensions.
constexpr int kLeastPoolPiece = 8;
int pieces_a_window(int64_t windows, int d, int64_t threads) {
  int pieces = 1;
  while (d % (2 * pieces) == 0 && d / (2 * pieces) >= kLeastPoolPiece && windows * 2 * pieces <= threads) pieces *= 2;
  return pieces;
}

}  // namespace

void compress_tokens(const kernels::Kernels& k, const CompressorWeights& w, const Rope& rope, int rope_dim, float norm_eps, const float* kv,
                     const float* score, int64_t start_pos, int64_t n, CompressorStateView st, int64_t pooled_from,
                     const std::function<uint8_t*(int64_t)>& row_out) {
  const int r = w.ratio, d = w.head_dim;
  const int width = (w.overlap ? 2 : 1) * d;
  const kernels::KvRowFormat format{d - rope_dim, rope_dim};
  const TokenRows rows{w, st, kv, score, start_pos, width};
  // The windows these tokens complete, their rows asked for on this thread
  // (last first: a growing cache grows once), then pooled in parallel.
  std::vector<int64_t> windows;  // their last positions
  for (int64_t pos = start_pos; pos < start_pos + n; ++pos)
    if ((pos + 1) % r == 0 && pos >= pooled_from) windows.push_back(pos);
  std::vector<uint8_t*> out(windows.size());
  for (size_t i = windows.size(); i-- > 0;) out[i] = row_out(windows[i] / r);
  // Few windows: their dimensions pooled in pieces, in a job of their own;
  // many: a task a window, whole.
  const auto count = static_cast<int64_t>(windows.size());
  const int pieces = pieces_a_window(count, d, ThreadPool::current().num_threads()), piece = d / pieces;
  const bool in_pieces = pieces > 1;
  std::vector<float> pooled_all(in_pieces ? count * d : 0);
  if (in_pieces)
    parallel_for(count * pieces, 1, [&](int64_t a, int64_t b) {
      for (int64_t u = a; u < b; ++u) {
        const int64_t i = u / pieces;
        const int k0 = static_cast<int>(u % pieces) * piece;
        pool(rows, windows[i] + 1 - r, k0, k0 + piece, &pooled_all[i * d]);
      }
    });
  parallel_for(count, 1, [&](int64_t a, int64_t b) {
    std::vector<float> pooled(d), row(d), cos(rope_dim / 2), sin(rope_dim / 2);
    for (int64_t i = a; i < b; ++i) {
      const int64_t first = windows[i] + 1 - r;
      if (!in_pieces) pool(rows, first, 0, d, pooled.data());
      kernels::rms_norm(in_pieces ? &pooled_all[i * d] : pooled.data(), w.norm.data(), d, norm_eps, row.data());
      rope.angles(first, cos.data(), sin.data());
      kernels::rope(row.data() + d - rope_dim, cos.data(), sin.data(), rope_dim / 2, false);
      if (w.rotate) {
        k.hadamard(row.data(), d, pooled.data());
        kernels::store_index_row(row.data(), d, out[i]);
      } else {
        k.store_kv_row(row.data(), format, out[i]);
      }
    }
  });
  // Only now the ring takes these tokens (the windows above read the ones
  // before them from it): the last st.slots of them are all it keeps.
  const int64_t kept = std::min<int64_t>(n, st.slots);
  parallel_for(kept, 32, [&](int64_t a, int64_t b) {
    for (int64_t i = n - kept + a; i < n - kept + b; ++i) {
      const int64_t pos = start_pos + i, slot = slot_of(pos, st.slots);
      std::memcpy(&st.kv[slot * width], kv + i * width, sizeof(float) * width);
      for (int c = 0; c < width; ++c) st.score[slot * width + c] = rows.score_at(pos, c);
    }
  });
}

}  // namespace dsv4
