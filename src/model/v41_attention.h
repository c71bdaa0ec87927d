// DeepSeek-V4.1 attention: low-rank queries, one KV head over a sliding
// window (FP8-rounded rows) plus compressed rows of ratio 2 or 1 that only
// the KV source layers compute and the layers after them share, picked by
// the indexers of the index source layers (two-level after the candidate
// source); an attention sink; grouped low-rank output.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dispatch.h"
#include "model/collectives.h"
#include "model/config.h"
#include "model/rope.h"
#include "model/sequence_cache.h"
#include "model/token_split.h"
#include "model/v41_weights.h"

namespace dsv4 {

// One sequence's rows of a forward: positions start_pos .. start_pos +
// num_tokens - 1 at rows row_begin.. of the batch. Positions below
// prefill_len are its prompt: they compute what the reference's one-shot
// prefill of the prompt computes, later ones what its decode steps do.
// Its cache holds the rows in V4.1's formats (CacheGeometry): window rows
// of every layer, compressed rows and index keys of the KV sources, their
// open groups.
struct V41Chunk {
  SequenceCache* cache = nullptr;
  int64_t start_pos = 0, num_tokens = 0, row_begin = 0, prefill_len = 0;
  // Rows of positions below this live in pages shared with the prefix
  // cache: recomputed, not written.
  int64_t cached_until = 0;
  // Write every position's window row (a prefix cache keeps blocks), not
  // only the last window's.
  bool keep_all_window_rows = false;
};

// What a forward's layers hand down to the layers after them, per row (the
// reference's SharedAttentionRuntime): the latest index source's choice of
// compressed rows (-1: none) and the candidate source's mask.
struct V41Shared {
  std::vector<std::vector<int32_t>> topk;
  std::vector<std::vector<uint8_t>> candidates;
};

struct V41LayerContext {
  const ModelConfig& config;
  const Rope& rope;  // plain RoPE for window-only layers, YaRN for the others
  int layer = 0;
  // Tensor parallelism (null: one rank): this rank attends with its block of
  // the heads (V41Attention as loaded); every rank computes the same whole
  // KV, compressed and index rows, and gets the whole output.
  Collectives* tp = nullptr;
  // FlashComm1: the output holds only this rank's block of the rows (its
  // inputs are still every row).
  const TokenSplit* held = nullptr;
  // Fast: the attention's products fused into its sums (its linears are
  // packed, V41Linear::packed).
  kernels::Numerics numerics = kernels::Numerics::kExact;
};

// x [rows, dim] (after attn_norm) -> out [rows, dim] (under ctx.held, this rank's block of them).
void v41_attention(const V41Attention& w, const V41LayerContext& ctx, const std::vector<V41Chunk>& chunks,
                   const float* x, int64_t rows, V41Shared* shared, float* out);

// The decode rows of a chunk run as the reference's decode steps do, one
// after the other: an index layer whose group is still open reads the
// index keys of the last source that published, often a later layer, as
// they stood after the step before. Within one forward a later layer has
// not written the chunk's own rows yet, so a row needing them must wait for
// a forward of its own. The first row of a chunk at positions start_pos..
// start_pos + num_tokens - 1 that would read such rows (num_tokens: none).
int64_t v41_first_row_after_unwritten_keys(const ModelConfig& c, int64_t start_pos, int64_t num_tokens,
                                           int64_t prefill_len);

// The window KV rows of inputs x [n, dim] (after attn_norm) at `positions`
// (n of them): kv_norm(wkv(x)), RoPE, the FP8 rounding; kv [n, head_dim].
void v41_window_kv(const V41Attention& w, const V41LayerContext& ctx, const float* x,
                   const std::vector<int64_t>& positions, float* kv);

// A DSpark stage's view of one draft: its ring's filled slots in slot
// order (decoded rows), and the position of the block's first row.
struct V41DSparkView {
  std::vector<const float*> ring;
  int64_t first_pos = 0;
};

// A DSpark stage's attention over views.size() blocks of `block` rows each:
// each row attends its view's ring, then every row of its block.
// x [rows, dim] (after attn_norm) -> out [rows, dim].
void v41_dspark_attention(const V41Attention& w, const V41LayerContext& ctx, const std::vector<V41DSparkView>& views,
                          int64_t block, const float* x, float* out);

// The reference's sparse_attn for one query row: `heads` heads of q
// [heads, head_dim] over the KV rows kv[j] (nullptr: an unused index) in
// blocks of 64 with an online softmax from -1e30; out [heads, head_dim].
void v41_sparse_attention(kernels::Numerics numerics, const float* q, int heads, int64_t head_dim,
                          const std::vector<const float*>& kv, const float* sinks, float scale, float* out);

}  // namespace dsv4
