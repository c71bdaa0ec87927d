#include "model/cache_geometry.h"

#include <algorithm>

namespace dsv4 {

namespace {
int64_t coff_of(int ratio) { return ratio == 4 ? 2 : 1; }
}  // namespace

int64_t CacheGeometry::compressor_slots(int ratio) const { return coff_of(ratio) * ratio + draft_slack; }

int64_t CacheGeometry::compressor_state_floats(int ratio, int64_t dim) const {
  return compressor_slots(ratio) * coff_of(ratio) * dim;
}

int64_t CacheGeometry::prefix_replay_tokens() const {
  for (const LayerCacheShape& s : layers)
    if (s.compressed && s.ratio == 4) return 4;
  return 0;
}

CacheGeometry CacheGeometry::of(const ModelConfig& c, int draft_slack) {
  CacheGeometry g;
  g.window = c.window_size;
  g.head_dim = c.head_dim;
  g.index_head_dim = c.index_head_dim;
  g.num_main_layers = c.n_layers;
  g.draft_slack = draft_slack;
  g.kv_row = {c.head_dim - c.rope_head_dim, c.rope_head_dim};
  g.index_row_bytes = kernels::index_row_bytes(c.index_head_dim);
  const bool v41 = c.family == ModelFamily::kV41;
  g.window_row_bytes = v41 ? kernels::v41_window_row_bytes(c.head_dim) : g.kv_row.bytes();
  g.compressed_row_bytes = v41 ? kernels::v41_compressed_row_bytes(c.head_dim) : g.kv_row.bytes();
  auto has = [](const std::vector<int>& layers, int l) { return std::find(layers.begin(), layers.end(), l) != layers.end(); };
  // DSpark stages are sliding-window layers here: their rings are window
  // rows by position (slot = position % window is the same set of rows).
  for (int l = 0; l < c.n_layers + c.n_mtp_layers + c.dspark_stages; ++l) {
    LayerCacheShape s;
    s.ratio = c.compress_ratios[l];
    s.dspark_ring = l >= c.n_layers + c.n_mtp_layers;
    if (v41) {
      s.compressed = s.ratio > 0 && has(c.shared.kv_source_layers, l);
      s.indexer = s.compressed && has(c.shared.index_source_layers, l);
      // A ratio-2 source's open group; its keys have no compressor of their own.
      if (s.compressed && s.ratio > 1) s.state_floats = g.compressor_state_floats(s.ratio, c.head_dim);
    } else {
      s.compressed = s.ratio > 0;
      s.indexer = s.ratio == 4;
      if (s.ratio) s.state_floats = g.compressor_state_floats(s.ratio, c.head_dim);
      if (s.indexer) s.index_state_floats = g.compressor_state_floats(4, c.index_head_dim);
    }
    g.layers.push_back(s);
  }
  return g;
}

}  // namespace dsv4
