// Where each cache layer's rows live inside the pages of the cache
// families (seven for the model, an eighth for a DSpark drafter). A page of
// a family holds that family's rows for every layer of the family, so one
// page id serves all of them (as vLLM's block ids do):
//
// Rows are stored as the reference rounds them (FP8 KV rows, FP4 index keys,
// see kernels/cache_rows.h); compressor states are float32 rings.
//
//   ori              raw window KV, block_size tokens per page (a ring)
//   cmp_c4           ratio-4 compressed rows, a page per 128 source tokens
//   cmp_c128         rows of the other compressed layers (ratio 128 in V4;
//                    V4.1's KV sources at ratios 2 and 1),
//                    a page per 128 source tokens
//   idx              indexer keys of the ratio-4 layers, per 128 tokens
//   csa_state        ratio-4 compressor states, one page per request
//   csa_inner_state  the indexers' compressor states, one page per request
//   hca_state        the other compressors' states, one page per request
//   dspark_ring      the DSpark stages' rings: window rows like ori's (slot
//                    position % window is the same set of rows), paged and
//                    released the same way, block_size tokens per page
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/cache_geometry.h"

namespace dsv4 {

enum class CacheFamily { kOri, kCmpC4, kCmpC128, kIdx, kCsaState, kCsaInnerState, kHcaState, kDSparkRing };
inline constexpr int kNumCacheFamilies = 8;
const char* family_name(CacheFamily f);
// Families of window rows indexed by position / block_size (ori and the
// DSpark rings): allocated, released behind the window and kept by the
// prefix cache alike.
inline constexpr CacheFamily kWindowFamilies[] = {CacheFamily::kOri, CacheFamily::kDSparkRing};
inline bool is_window_family(CacheFamily f) { return f == CacheFamily::kOri || f == CacheFamily::kDSparkRing; }

// Source tokens one compressed page covers.
inline constexpr int64_t kCompressedPageTokens = kBlockTokens;

// A family's storage starts at a multiple of kPageAlign bytes; pages and
// the layers' areas in them at multiples of kAreaAlign (state areas hold
// floats).
inline constexpr int64_t kPageAlign = 64;
inline constexpr int64_t kAreaAlign = 8;

struct FamilyLayout {
  int64_t page_bytes = 0;               // 0: the model has no layer in this family
  std::vector<int64_t> layer_offset;    // per cache layer, in bytes; -1 when not in the family
  std::vector<int64_t> rows_per_page;   // compressed families: 128 / ratio
};

struct PageLayout {
  int64_t block_size = 32;
  CacheGeometry geometry;
  std::array<FamilyLayout, kNumCacheFamilies> families;

  static StatusOr<PageLayout> of(const CacheGeometry& geometry, int64_t block_size);
  const FamilyLayout& family(CacheFamily f) const { return families[static_cast<int>(f)]; }
  // The family holding cache layer l's compressed rows.
  CacheFamily compressed_family(int layer) const {
    return geometry.layers[layer].ratio == 4 ? CacheFamily::kCmpC4 : CacheFamily::kCmpC128;
  }
  // The family holding cache layer l's window rows.
  CacheFamily window_family(int layer) const {
    return geometry.layers[layer].dspark_ring ? CacheFamily::kDSparkRing : CacheFamily::kOri;
  }
};

}  // namespace dsv4
