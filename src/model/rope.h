// Rotary embedding frequencies: plain RoPE for sliding-window layers and YaRN
// (blended per-dimension interpolation) for compressed layers.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace dsv4 {

struct RopeOptions {
  int rope_dim = 64;
  float base = 10000.0f;
  int original_seq_len = 0;  // 0: no YaRN
  float factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
};

// Plain RoPE (rope_theta) for sliding-window layers; YaRN with
// compress_rope_theta for the layers that read compressed rows.
RopeOptions window_rope_options(const ModelConfig& c);
RopeOptions compress_rope_options(const ModelConfig& c);

class Rope {
 public:
  explicit Rope(const RopeOptions& options);

  int pairs() const { return static_cast<int>(inv_freq_.size()); }
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  // cos/sin of the angles at position pos, pairs() values each.
  void angles(int64_t pos, float* cos, float* sin) const;

 private:
  std::vector<float> inv_freq_;
};

}  // namespace dsv4
