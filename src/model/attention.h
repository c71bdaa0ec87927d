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

}  // namespace dsv4
