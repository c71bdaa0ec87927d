// What one DeepSeek-V4.1 sequence carries from one forward to the next, per
// layer: the window ring (every layer), and on the KV sources the
// compressed rows, the index keys and the open group of the compressor; per
// DSpark stage its ring.
// Rows hold the values the reference's caches hold (already through their
// FP8 / FP4 rounding), as f32.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace dsv4 {

struct V41Sequence {
  int64_t length = 0;  // positions already processed
  std::vector<std::vector<float>> window;      // [layer][window_size * head_dim], slot p % window_size
  std::vector<std::vector<float>> compressed;  // [layer][rows * head_dim] (KV sources)
  std::vector<std::vector<float>> index_keys;  // [layer][rows * index_head_dim] (KV sources)
  // The open group's rows (ratio above 1): kv and gate scores [ratio * head_dim].
  std::vector<std::vector<float>> group_kv, group_score;
  std::vector<int64_t> engram_history;         // compressed token ids, one per position
  // Per DSpark stage: its window ring of the target's rows, slot p % window_size.
  std::vector<std::vector<float>> dspark_ring;

  explicit V41Sequence(const ModelConfig& c)
      : window(c.n_layers, std::vector<float>(static_cast<size_t>(c.window_size) * c.head_dim)),
        compressed(c.n_layers),
        index_keys(c.n_layers),
        group_kv(c.n_layers),
        group_score(c.n_layers),
        dspark_ring(c.dspark_stages, std::vector<float>(static_cast<size_t>(c.window_size) * c.head_dim)) {
    for (int l : c.shared.kv_source_layers) {
      const int r = c.compress_ratio(l);
      group_kv[l].assign(static_cast<size_t>(r) * c.head_dim, 0.0f);
      group_score[l].assign(static_cast<size_t>(r) * c.head_dim, -INFINITY);
    }
  }
};

}  // namespace dsv4
