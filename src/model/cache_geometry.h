// What a sequence's caches hold per cache layer (the main layers, then the
// MTP layers), derived from the config. The contiguous and the paged caches
// are both sized from this.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace dsv4 {

struct LayerCacheShape {
  int ratio = 0;               // 0: sliding window only
  bool indexer = false;        // ratio 4: indexer keys and their compressor
  int64_t state_floats = 0;    // one compressor state array (kv or score)
  int64_t index_state_floats = 0;
};

struct CacheGeometry {
  int64_t window = 0;
  int64_t head_dim = 0;
  int64_t index_head_dim = 0;
  int num_main_layers = 0;
  std::vector<LayerCacheShape> layers;  // cache layer l: main layers, then MTP

  static CacheGeometry of(const ModelConfig& c);
  // Floats of one compressor state array: [coff*ratio, coff*head_dim], coff 2
  // when windows overlap (ratio 4).
  static int64_t compressor_state_floats(int ratio, int64_t head_dim);
};

}  // namespace dsv4
