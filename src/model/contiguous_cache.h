// A sequence's caches in plain per-layer vectors: the window as a ring of
// window_size rows (plus room for rejected draft rows), compressed and
// indexer rows growing with the sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "model/cache_geometry.h"
#include "model/sequence_cache.h"

namespace dsv4 {

class ContiguousCache : public SequenceCache {
 public:
  // Holds the cache layers [first_layer, first_layer + num_layers).
  ContiguousCache(const CacheGeometry& geometry, int first_layer, int num_layers);

  uint8_t* window_row(int layer, int64_t pos) override;
  uint8_t* compressed_row(int layer, int64_t row) override;
  uint8_t* index_row(int layer, int64_t row) override;
  CompressorStateView compressor_state(int layer) override;
  CompressorStateView index_compressor_state(int layer) override;
  // Bytes the caches hold (window rings, compressed rows, states).
  int64_t bytes() const;

 private:
  struct Layer {
    std::vector<uint8_t> window, compressed, index_keys;
    std::vector<float> state_kv, state_score, index_state_kv, index_state_score;
  };
  Layer& at(int layer);
  int64_t window_rows() const { return geometry_.window + kMaxDraftTokens + 1; }
  static uint8_t* grow_row(std::vector<uint8_t>& rows, int64_t row, int64_t width);

  CacheGeometry geometry_;
  int first_layer_;
  std::vector<Layer> layers_;
};

}  // namespace dsv4
