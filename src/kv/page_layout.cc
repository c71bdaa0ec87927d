#include "kv/page_layout.h"

namespace dsv4 {

const char* family_name(CacheFamily f) {
  switch (f) {
    case CacheFamily::kOri: return "ori";
    case CacheFamily::kCmpC4: return "cmp_c4";
    case CacheFamily::kCmpC128: return "cmp_c128";
    case CacheFamily::kIdx: return "idx";
    case CacheFamily::kCsaState: return "csa_state";
    case CacheFamily::kCsaInnerState: return "csa_inner_state";
    case CacheFamily::kHcaState: return "hca_state";
    case CacheFamily::kDSparkRing: return "dspark_ring";
  }
  return "?";
}

StatusOr<PageLayout> PageLayout::of(const CacheGeometry& g, int64_t block_size) {
  if (block_size <= 0) return invalid_argument("block size must be positive, got " + std::to_string(block_size));
  PageLayout p;
  p.block_size = block_size;
  p.geometry = g;
  const int layers = static_cast<int>(g.layers.size());
  for (FamilyLayout& f : p.families) {
    f.layer_offset.assign(layers, -1);
    f.rows_per_page.assign(layers, 0);
  }
  auto add = [&](CacheFamily fam, int l, int64_t bytes, int64_t rows) {
    FamilyLayout& f = p.families[static_cast<int>(fam)];
    f.layer_offset[l] = f.page_bytes;
    f.rows_per_page[l] = rows;
    f.page_bytes += (bytes + kAreaAlign - 1) / kAreaAlign * kAreaAlign;
  };
  for (int l = 0; l < layers; ++l) {
    const LayerCacheShape& s = g.layers[l];
    add(p.window_family(l), l, block_size * g.window_row_bytes, block_size);
    if (!s.compressed) continue;
    if (kCompressedPageTokens % s.ratio != 0)
      return invalid_argument("compress ratio " + std::to_string(s.ratio) + " of cache layer " + std::to_string(l) +
                              " does not divide the " + std::to_string(kCompressedPageTokens) +
                              "-token compressed page");
    const int64_t rows = kCompressedPageTokens / s.ratio;
    const bool c4 = s.ratio == 4;
    add(c4 ? CacheFamily::kCmpC4 : CacheFamily::kCmpC128, l, rows * g.compressed_row_bytes, rows);
    if (s.indexer) add(CacheFamily::kIdx, l, rows * g.index_row_bytes, rows);
    if (s.state_floats) add(c4 ? CacheFamily::kCsaState : CacheFamily::kHcaState, l, 2 * 4 * s.state_floats, 0);
    if (s.index_state_floats) add(CacheFamily::kCsaInnerState, l, 2 * 4 * s.index_state_floats, 0);
  }
  return p;
}

}  // namespace dsv4
