// What one sequence carries from one forward to the next: the attention
// caches of every layer. Contiguous per sequence here; the engine's paged
// cache families (ori, cmp_c4, cmp_c128, idx and the compressor states) hold
// the same contents in pages.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4 {

// The partly filled compression window: kv and gate scores (ape added) of
// its tokens, and with overlapping windows the previous window too.
// Layout [coff*ratio, coff*head_dim], coff = 2 when windows overlap.
struct CompressorState {
  std::vector<float> kv;
  std::vector<float> score;  // -inf in slots no token has filled
};

struct LayerState {
  std::vector<float> window;      // ring [window_size, head_dim]; position p in slot p % window_size
  std::vector<float> compressed;  // [rows, head_dim], row i pools positions [i*ratio, (i+1)*ratio)
  CompressorState compressor;
  std::vector<float> index_keys;  // [rows, index_head_dim], ratio-4 layers
  CompressorState index_compressor;
};

struct SequenceState {
  int64_t length = 0;  // positions already processed
  std::vector<LayerState> layers;
};

}  // namespace dsv4
