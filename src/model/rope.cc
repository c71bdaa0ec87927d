#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace dsv4 {
namespace {

// Dimension whose wavelength makes num_rotations turns over max_seq_len.
double correction_dim(double num_rotations, int dim, double base, double max_seq_len) {
  return dim * std::log(max_seq_len / (num_rotations * 2 * M_PI)) / (2 * std::log(base));
}

}  // namespace

Rope::Rope(const RopeOptions& o) {
  const int half = o.rope_dim / 2;
  inv_freq_.resize(half);
  // float32 throughout, as the reference computes its table.
  for (int i = 0; i < half; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(o.rope_dim);
    inv_freq_[i] = 1.0f / std::pow(o.base, exponent);
  }
  if (o.original_seq_len > 0) {
    int low = static_cast<int>(std::floor(correction_dim(o.beta_fast, o.rope_dim, o.base, o.original_seq_len)));
    int high = static_cast<int>(std::ceil(correction_dim(o.beta_slow, o.rope_dim, o.base, o.original_seq_len)));
    low = std::max(low, 0);
    high = std::min(high, o.rope_dim - 1);
    float lo = static_cast<float>(low), hi = static_cast<float>(high);
    if (low == high) hi += 0.001f;
    for (int i = 0; i < half; ++i) {
      float ramp = std::clamp((static_cast<float>(i) - lo) / (hi - lo), 0.0f, 1.0f);
      float smooth = 1.0f - ramp;
      inv_freq_[i] = inv_freq_[i] / o.factor * (1.0f - smooth) + inv_freq_[i] * smooth;
    }
  }
}

void Rope::angles(int64_t pos, float* cos, float* sin) const {
  const float t = static_cast<float>(pos);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    float a = t * inv_freq_[i];
    // The reference's table comes from torch.polar, which calls libm's
    // float cosf/sinf element by element.
    cos[i] = std::cos(a);
    sin[i] = std::sin(a);
  }
}

RopeOptions window_rope_options(const ModelConfig& c) {
  RopeOptions o;
  o.rope_dim = c.rope_head_dim;
  o.base = c.rope_theta;
  return o;  // no YaRN on pure sliding-window layers
}

RopeOptions compress_rope_options(const ModelConfig& c) {
  RopeOptions o;
  o.rope_dim = c.rope_head_dim;
  o.base = c.compress_rope_theta;
  o.original_seq_len = c.original_seq_len;
  o.factor = c.rope_factor;
  o.beta_fast = c.beta_fast;
  o.beta_slow = c.beta_slow;
  return o;
}

}  // namespace dsv4
