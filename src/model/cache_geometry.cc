#include "model/cache_geometry.h"

namespace dsv4 {

int64_t CacheGeometry::compressor_slots(int ratio) {
  const int64_t coff = ratio == 4 ? 2 : 1;
  return coff * ratio + kMaxDraftTokens + 1;
}

int64_t CacheGeometry::compressor_state_floats(int ratio, int64_t head_dim) {
  const int64_t coff = ratio == 4 ? 2 : 1;
  return compressor_slots(ratio) * coff * head_dim;
}

CacheGeometry CacheGeometry::of(const ModelConfig& c) {
  CacheGeometry g;
  g.window = c.window_size;
  g.head_dim = c.head_dim;
  g.index_head_dim = c.index_head_dim;
  g.num_main_layers = c.n_layers;
  for (int l = 0; l < c.n_layers + c.n_mtp_layers; ++l) {
    LayerCacheShape s;
    s.ratio = c.compress_ratios[l];
    s.indexer = s.ratio == 4;
    if (s.ratio) s.state_floats = compressor_state_floats(s.ratio, c.head_dim);
    if (s.indexer) s.index_state_floats = compressor_state_floats(4, c.index_head_dim);
    if (s.ratio == 4) s.tail_floats = 2 * s.ratio * c.head_dim;
    if (s.indexer) s.index_tail_floats = 2 * 4 * c.index_head_dim;
    g.layers.push_back(s);
  }
  return g;
}

}  // namespace dsv4
