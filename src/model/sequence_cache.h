// What one sequence carries from one forward to the next, as the forward
// sees it: rows addressed by cache layer (main layers, then MTP layers, then
// DSpark stages) and
// position or row index. ContiguousCache keeps them in plain vectors (verify,
// tests); the engine's paged cache (src/kv) keeps them in the seven page
// families. The forward only touches rows of its own chunks' sequences.
#pragma once

#include <cstdint>

namespace dsv4 {

// The compressor's partly filled window: kv and gate scores (ape added) of
// its tokens, with overlapping windows the previous window too, as a ring of
// `slots` slots indexed by position (see CacheGeometry::compressor_slots).
// Each is [slots, coff*head_dim]; a fresh state has kv 0 and score -inf.
struct CompressorStateView {
  float* kv = nullptr;
  float* score = nullptr;
  int64_t slots = 0;
};

void reset_compressor_state(CompressorStateView state, int64_t floats);

class SequenceCache {
 public:
  virtual ~SequenceCache() = default;

  // Rows are stored as the reference rounds them (kernels/cache_rows.h):
  // Raw KV row (CacheGeometry::kv_row) of position pos; the forward reads
  // only the last window_size positions before its chunk and writes its
  // chunk's last ones.
  virtual uint8_t* window_row(int layer, int64_t pos) = 0;
  // Compressed KV row (kv_row) pooling positions [row*ratio, (row+1)*ratio).
  virtual uint8_t* compressed_row(int layer, int64_t row) = 0;
  // Indexer key row (index_row_bytes) of a ratio-4 layer.
  virtual uint8_t* index_row(int layer, int64_t row) = 0;
  virtual CompressorStateView compressor_state(int layer) = 0;
  virtual CompressorStateView index_compressor_state(int layer) = 0;

  int64_t length = 0;  // positions already processed
};

}  // namespace dsv4
