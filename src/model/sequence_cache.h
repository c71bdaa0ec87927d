// What one sequence carries from one forward to the next, as the forward
// sees it: rows addressed by cache layer (main layers, then MTP layers) and
// position or row index. ContiguousCache keeps them in plain vectors (verify,
// tests); the engine's paged cache (src/kv) keeps them in the seven page
// families. The forward only touches rows of its own chunks' sequences.
#pragma once

#include <cstdint>

namespace dsv4 {

// The compressor's partly filled window: kv and gate scores (ape added) of
// its tokens, with overlapping windows the previous window too. Each is
// [coff*ratio, coff*head_dim]; a fresh state has kv 0 and score -inf.
struct CompressorStateView {
  float* kv = nullptr;
  float* score = nullptr;
};

void reset_compressor_state(CompressorStateView state, int64_t floats);

class SequenceCache {
 public:
  virtual ~SequenceCache() = default;

  // Raw KV row (head_dim) of position pos; the forward reads only the last
  // window_size positions before its chunk and writes its chunk's last ones.
  virtual float* window_row(int layer, int64_t pos) = 0;
  // Compressed KV row (head_dim) pooling positions [row*ratio, (row+1)*ratio).
  virtual float* compressed_row(int layer, int64_t row) = 0;
  // Indexer key row (index_head_dim) of a ratio-4 layer.
  virtual float* index_row(int layer, int64_t row) = 0;
  virtual CompressorStateView compressor_state(int layer) = 0;
  virtual CompressorStateView index_compressor_state(int layer) = 0;
  // Where the compressor (or the indexer's, `index`) saves its state's tail
  // at the end of block `block` (LayerCacheShape::tail_floats); null: not
  // kept (only a prefix cache needs them).
  virtual float* compressor_tail(int layer, int64_t block, bool index) { return nullptr; }

  int64_t length = 0;  // positions already processed
};

}  // namespace dsv4
