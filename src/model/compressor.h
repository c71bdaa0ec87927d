// KV compression: gated softmax pooling of `ratio` consecutive tokens into one
// row (overlapping a window's predecessor when ratio is 4), then RMSNorm,
// RoPE at the window's first position, and the reference's QAT rounding.
#pragma once

#include <cstdint>
#include <functional>

#include "model/rope.h"
#include "model/sequence_cache.h"
#include "model/weights.h"

namespace dsv4 {

// Feeds positions [start_pos, start_pos + n) of one sequence, whose wkv and
// wgate projections are kv[n, width] and score[n, width], through its
// compressor state (a ring indexed by position, see CacheGeometry), and
// writes each window that completes (positions [j*ratio, (j+1)*ratio)) to
// row_out(j) ([head_dim]). With overlapping windows, at the end of each
// kBlockTokens block b it saves the state's tail to tail_out(b) when that
// gives a place (see LayerCacheShape::tail_floats). qat_round: see
// ModelOptions.
void compress_tokens(const CompressorWeights& w, const Rope& rope, int rope_dim, float norm_eps, bool qat_round,
                     const float* kv, const float* score, int64_t start_pos, int64_t n, CompressorStateView st,
                     const std::function<float*(int64_t)>& row_out,
                     const std::function<float*(int64_t)>& tail_out = nullptr);

// Puts a block's saved tail back into a (reset) state, so the positions
// from `boundary` on compress as if the whole prefix had been fed.
void restore_compressor_tail(int ratio, int64_t head_dim, CompressorStateView st, int64_t boundary,
                             const float* tail);

}  // namespace dsv4
