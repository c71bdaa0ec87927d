// What a sequence's caches hold per cache layer (the main layers, then the
// MTP layers, then DSpark stages), derived from the config (V4 or V4.1). The contiguous and the paged caches
// are both sized from this.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cache_rows.h"
#include "model/config.h"

namespace dsv4 {

// Draft rows a speculative step may add after the committed token, at most.
// The compressor states are rings with as many slots of slack as the
// engine's drafts (see compressor_slots), so rows a step writes and then
// rejects never overwrite a slot a later window still reads: nothing has to
// be rolled back.
inline constexpr int kMaxDraftTokens = 7;

// Source tokens per prefix-cache block (and per compressed page).
inline constexpr int64_t kBlockTokens = 128;

struct LayerCacheShape {
  int ratio = 0;               // 0: sliding window only
  bool dspark_ring = false;    // a DSpark stage: its window rows are the stage's ring
  // Whether the layer stores compressed rows and indexer keys of its own.
  // V4: every compressed layer its rows, the ratio-4 layers keys (with
  // their own compressor). V4.1: only the KV sources, whose keys come from
  // their latents; the other layers read the latest source's.
  bool compressed = false;
  bool indexer = false;
  int64_t state_floats = 0;    // one compressor state array (kv or score)
  int64_t index_state_floats = 0;
};

struct CacheGeometry {
  int64_t window = 0;
  int64_t head_dim = 0;
  int64_t index_head_dim = 0;
  int num_main_layers = 0;
  // Draft rows beyond the committed token a step may write (0 without
  // speculative decoding): the compressor rings' slack.
  int draft_slack = 0;
  kernels::KvRowFormat kv_row;  // V4's window and compressed rows (FP8 + RoPE dims)
  // Bytes of one row (V4: kv_row; V4.1: window rows FP8 in 32s, compressed
  // rows FP4 with E4M3 scales per 16; index keys FP4 in both).
  int64_t window_row_bytes = 0;
  int64_t compressed_row_bytes = 0;
  int64_t index_row_bytes = 0;
  std::vector<LayerCacheShape> layers;  // cache layer l: main layers, then MTP, then DSpark stages

  static CacheGeometry of(const ModelConfig& c, int draft_slack = 0);
  // A compressor state is a ring of slots indexed by position: the window
  // and, when windows overlap (ratio 4, coff 2), its predecessor, plus
  // draft_slack slots.
  int64_t compressor_slots(int ratio) const;
  // Floats of one compressor state array: [compressor_slots, coff*head_dim].
  int64_t compressor_state_floats(int ratio, int64_t head_dim) const;
  // Positions a request resuming at a prefix-cache block end recomputes
  // before it: the overlapping compressors' first window after the end reads
  // its predecessor's projections, which no cache keeps (see
  // docs/kv-cache.md); 0 when no layer overlaps.
  int64_t prefix_replay_tokens() const;
};

}  // namespace dsv4
