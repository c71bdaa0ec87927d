// KV compression: gated softmax pooling of `ratio` consecutive tokens into one
// row (overlapping a window's predecessor when ratio is 4), then RMSNorm,
// RoPE at the window's first position, and the reference's QAT rounding.
#pragma once

#include <cstdint>
#include <functional>

#include "kernels/dispatch.h"
#include "model/rope.h"
#include "model/sequence_cache.h"
#include "model/weights.h"

namespace dsv4 {

// Feeds positions [start_pos, start_pos + n) of one sequence, whose wkv and
// wgate projections are kv[n, width] and score[n, width], through its
// compressor state (a ring indexed by position, see CacheGeometry), and
// stores each window that completes (positions [j*ratio, (j+1)*ratio)) in
// row_out(j) as the cache keeps it: a KV row, or with w.rotate an index key
// row (kernels/cache_rows.h). Windows ending before `pooled_from` are only
// recorded in the state, not pooled: their rows are in the cache already
// (a request resuming from a prefix-cache hit recomputes the positions
// before it to rebuild its state). row_out is called on the calling thread,
// the highest row first, and what it returns must stay valid until the call
// returns: the windows pool in parallel.
void compress_tokens(const kernels::Kernels& k, const CompressorWeights& w, const Rope& rope, int rope_dim, float norm_eps, const float* kv,
                     const float* score, int64_t start_pos, int64_t n, CompressorStateView st, int64_t pooled_from,
                     const std::function<uint8_t*(int64_t)>& row_out);

}  // namespace dsv4
