// DeepSeek-V4 attention: low-rank queries, one shared KV head, a sliding
// window of raw keys plus compressed rows (all of them at ratio 128, the
// indexer's top-k at ratio 4), an attention sink, and grouped low-rank output.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dispatch.h"
#include "model/collectives.h"
#include "model/config.h"
#include "model/forward_batch.h"
#include "model/rope.h"
#include "model/weights.h"

namespace dsv4 {

struct LayerContext {
  const kernels::Kernels& k;  // the forward's kernels (ISA and numerics)
  const ModelConfig& config;
  const Rope& rope;     // plain for window layers, YaRN for compressed ones
  int cache_layer = 0;  // which layer of each sequence's cache this block uses
  Collectives* tp = nullptr;  // tensor-parallel group: this rank holds a slice of the heads
};

// x: [rows, dim] (after attn_norm) -> out: [rows, wo_b.out], this rank's
// share of the output features (all of them without tensor parallelism).
// Reads and extends each chunk's sequence cache at ctx.cache_layer.
void attention_forward(const AttentionWeights& w, const LayerContext& ctx, const std::vector<SeqChunk>& chunks,
                       const float* x, int64_t rows, float* out);

// Pieces the DSpark drafter's attention shares, rows at positions pos: the
// KV row of each row (normed, rotated, stored as the cache's FP8 rows:
// KvRowFormat{nope, rope}), and the output (o [rows, heads, head_dim],
// de-rotated; grouped wo_a, wo_b) -> out [rows, wo_b.out].
void attention_kv_rows(const AttentionWeights& w, const LayerContext& ctx, const float* x, int64_t rows,
                       const std::vector<int64_t>& pos, uint8_t* kv_rows);
void attention_output(const AttentionWeights& w, const LayerContext& ctx, const float* o, int64_t rows, float* out);

// One DSpark draft call's view of a stage: its ring's filled slots and
// where its block starts.
struct DSparkAttendCall {
  // KV rows of the ring's slots 0 .. min(window, p + 1) - 1, in slot order
  // (the reference's order of summation).
  std::vector<const uint8_t*> ring;
  int64_t first_pos = 0;  // p + 1: the block's rows sit at first_pos .. first_pos + block - 1
};

// A DSpark stage's attention: x [calls * block, dim] (after attn_norm), the
// block rows of each call attend its ring's filled slots and all of the
// call's block rows (non-causal); the block's own KV rows are not kept.
void dspark_attention_forward(const AttentionWeights& w, const LayerContext& ctx,
                              const std::vector<DSparkAttendCall>& calls, int64_t block, const float* x, float* out);

}  // namespace dsv4
