// A linear layer y = x W^T and the activation rounding the reference applies
// in front of FP8/FP4 weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsv4 {

enum class WeightFormat { kDense, kFp8Block, kFp4Block };

struct Linear {
  int64_t out = 0;
  int64_t in = 0;
  // Weights dequantized to f32, [out, in], while loading (slicing); pack()
  // moves them into `panels` (kernels::pack_panels) for the forward.
  std::vector<float> w;
  std::vector<float> panels;
  // Format the checkpoint stored. FP8/FP4 linears round their input through
  // FP8 e4m3 per 128 values first, as the reference's act_quant does.
  WeightFormat format = WeightFormat::kDense;
  bool quantizes_input() const { return format != WeightFormat::kDense; }
  void pack();
  int64_t resident_bytes() const { return 4 * static_cast<int64_t>(w.size() + panels.size()); }
};

// y[m, out] = round(x)[m, in] W^T, split over the thread pool.
void linear_forward(const Linear& layer, const float* x, int64_t m, float* y);

// y[m, n] = x[m, k] W[n, k]^T for a raw f32 weight.
void matmul(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y);

}  // namespace dsv4
