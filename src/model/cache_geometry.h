// What a sequence's caches hold per cache layer (the main layers, then the
// MTP layers), derived from the config. The contiguous and the paged caches
// are both sized from this.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace dsv4 {

// Draft rows a speculative step may add after the committed token. The
// compressor states are rings with this much slack (see compressor_slots),
// so rows a step writes and then rejects never overwrite a slot a later
// window still reads: nothing has to be rolled back.
inline constexpr int kMaxDraftTokens = 7;

// Source tokens per prefix-cache block (and per compressed page).
inline constexpr int64_t kBlockTokens = 128;

struct LayerCacheShape {
  int ratio = 0;               // 0: sliding window only
  bool indexer = false;        // ratio 4: indexer keys and their compressor
  int64_t state_floats = 0;    // one compressor state array (kv or score)
  int64_t index_state_floats = 0;
  // Overlapping compressors: the kv and score halves a window reads from its
  // predecessor, saved at each block end ([2, ratio, head_dim]) so a
  // request can resume there from a prefix-cache hit; 0 for the others
  // (their windows end exactly at block ends and start empty).
  int64_t tail_floats = 0;
  int64_t index_tail_floats = 0;
};

struct CacheGeometry {
  int64_t window = 0;
  int64_t head_dim = 0;
  int64_t index_head_dim = 0;
  int num_main_layers = 0;
  std::vector<LayerCacheShape> layers;  // cache layer l: main layers, then MTP

  static CacheGeometry of(const ModelConfig& c);
  // A compressor state is a ring of slots indexed by position: the window
  // and, when windows overlap (ratio 4, coff 2), its predecessor, plus
  // kMaxDraftTokens + 1 slots of slack.
  static int64_t compressor_slots(int ratio);
  // Floats of one compressor state array: [compressor_slots, coff*head_dim].
  static int64_t compressor_state_floats(int ratio, int64_t head_dim);
};

}  // namespace dsv4
