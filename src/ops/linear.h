// A linear layer y = x W^T and the activation rounding the reference applies
// in front of FP8/FP4 weights.
#pragma once

#include <cstdint>
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "base/weight_buffer.h"

namespace dsv4 {

namespace kernels {
struct Kernels;
}

// kDense: f32 (or f16) in the checkpoint, held as f32; kBf16 held as BF16;
// kInt8Channel: W8A8 (compressed-tensors), int8 with a scale per output
// channel, its input quantized to int8 per row; kFp8Block32: DeepSeek-V4.1's
// FP8 with a scale per [32, 32] tile, held per row and 32 inputs.
enum class WeightFormat { kDense, kBf16, kFp8Block, kFp4Block, kInt8Channel, kFp8Block32 };

struct Linear {
  int64_t out = 0;
  int64_t in = 0;
  // While loading (and slicing for tensor parallelism), as the checkpoint
  // stored it: dense weights as f32 [out, in], BF16 weights as their bytes
  // [out, in * 2], or FP8/FP4 codes one per byte [out, in] with e8m0 scales
  // per row and block [out, in / block], or int8 codes [out, in] with
  // channel_scales [out]. pack() moves them into the forward's panels
  // (kernels.h), each format staying as stored.
  std::vector<float> w;
  std::vector<uint8_t> codes, scales;
  std::vector<float> channel_scales;
  WeightBuffer<float> panels;
  WeightBuffer<uint8_t> code_panels, scale_panels;
  WeightFormat format = WeightFormat::kDense;  // how the checkpoint stored it
  // FP8/FP4 linears round their input through FP8 e4m3 per 128 values
  // first, as the reference's act_quant does (a few it uses dequantized);
  // W8A8 linears quantize it to int8 per row.
  bool round_input = false;
  int64_t input_block = 128;  // inputs per e4m3 scale of that rounding (DeepSeek-V4.1: 32)
  bool quantizes_input() const { return round_input; }
  // Moved, never copied: the loader's pending reads hold pointers into the
  // panel buffers, which a move keeps and a copy would not.
  Linear() = default;
  Linear(Linear&&) noexcept = default;
  Linear& operator=(Linear&&) noexcept = default;
  Linear(const Linear&) = delete;
  Linear& operator=(const Linear&) = delete;
  void pack();
  // An f32 [out, in] weight (kDense), as held before pack().
  static Linear dense(std::vector<float> weights, int64_t out, int64_t in) {
    Linear l;
    l.out = out;
    l.in = in;
    l.w = std::move(weights);
    return l;
  }
  // Each buffer holding this layer's weights (for binding it to a node).
  template <class Fn>
  void for_each_buffer(Fn&& fn) const {
    fn(static_cast<const void*>(w.data()), sizeof(float) * w.size());
    fn(static_cast<const void*>(codes.data()), codes.size());
    fn(static_cast<const void*>(scales.data()), scales.size());
    fn(static_cast<const void*>(channel_scales.data()), sizeof(float) * channel_scales.size());
    fn(static_cast<const void*>(panels.data()), sizeof(float) * panels.size());
    fn(static_cast<const void*>(code_panels.data()), code_panels.size());
    fn(static_cast<const void*>(scale_panels.data()), scale_panels.size());
  }
  int64_t resident_bytes() const {
    return static_cast<int64_t>(4 * (w.size() + panels.size() + channel_scales.size()) + codes.size() +
                                scales.size() + code_panels.size() + scale_panels.size());
  }
};

// y[m, out] = round(x)[m, in] W^T with kernels k, split over the thread pool.
void linear_forward(const kernels::Kernels& k, const Linear& layer, const float* x, int64_t m, float* y);

// Independent products as one pool job (after their inputs are rounded):
// every product's tiles in one list, so a layer's small linears (an
// expert's w1 and w3, every active expert's) keep a many-core node busy
// and cost one wake-up and join, not one each. Each y is what
// linear_forward would give.
// Called by the task that has just written outputs [r0, r1) x [f0, f1) of
// a product, inside the product job: work that needs only those outputs
// can follow them there instead of in a job of its own.
using WrittenFn = std::function<void(int64_t r0, int64_t r1, int64_t f0, int64_t f1)>;

// A step that follows a product runs in the product's job (written below)
// for at most this many rows, a decode step's: there a job of its own costs
// more than the step. For more rows the step gets its own job, which splits
// it evenly (in the product's job it lands on the tasks finishing last).
inline constexpr int64_t kStepInProductRows = 4;

// Runs done(r, j0, j1) on each piece [j0, j1) of `piece` outputs of each
// row r of a [rows, out] result once each of `products` products (say w1
// and w3) has written it, in their job, by the task that writes the last
// of it (acquiring the others' writes). The products take written().
class WhenPiecesWritten {
 public:
  using Done = std::function<void(int64_t r, int64_t j0, int64_t j1)>;
  WhenPiecesWritten(int64_t rows, int64_t out, int64_t piece, int products, Done done);
  WhenPiecesWritten(const WhenPiecesWritten&) = delete;
  WhenPiecesWritten& operator=(const WhenPiecesWritten&) = delete;
  const WrittenFn* written() const { return &written_; }

 private:
  void wrote(int64_t r0, int64_t r1, int64_t f0, int64_t f1);
  int64_t out_, piece_, pieces_;
  std::vector<std::atomic<int64_t>> unwritten_;  // [rows, pieces]: outputs still to come
  Done done_;
  WrittenFn written_;
};

struct LinearProduct {
  const Linear* layer = nullptr;
  const float* x = nullptr;
  int64_t m = 0;
  float* y = nullptr;
  const WrittenFn* written = nullptr;  // may be null
};
void linear_forward_all(const kernels::Kernels& k, const std::vector<LinearProduct>& products);

// Output panels [p_begin, p_end) of a packed layer (kernels::kPanel
// features each) for rows x [m, in] taken as they are (no input rounding):
// y[i, j] for those j, row stride ldy. One thread; for layers whose parts
// multiply different inputs.
void linear_panels(const kernels::Kernels& k, const Linear& layer, const float* x, int64_t m, int64_t p_begin,
                   int64_t p_end, float* y, int64_t ldy);

// y[m, n] = x[m, k] W[n, k]^T for a raw f32 weight.
void matmul(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y);

}  // namespace dsv4
