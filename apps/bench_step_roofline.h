// dsv4 bench's roofline per step: what a prefill chunk or a decode step
// must read and compute, and how long that takes on this machine at its
// memory bandwidth and at the peak of each kernel class doing the work
// (both measured in the same run). A step's roofline is the larger of the
// two times; the bench prints each row's share of it.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "base/work_meter.h"
#include "kernels/dispatch.h"
#include "model/deepseek_v4.h"

namespace dsv4::app {

// What one step must do. The weight bytes are measured (UniqueWeightBytes);
// the rest follows from the config and the positions of the step's tokens.
struct StepWork {
  double weight_bytes = 0;     // linear panels streamed, each byte once a step
  double kv_bytes = 0;         // cache rows read (window, compressed, index keys), each once
  // The linears' multiply-adds x 2 by the kernel class that runs them:
  // dot products of rounded inputs with FP8 (and int8) or FP4 panels (the
  // routed experts); f32 multiply-adds ("wide": the head's BF16 panels, f32
  // panels, and FP8 panels taken with unrounded inputs, as wo_a is).
  double fp8_flops = 0;
  double fp4_flops = 0;
  double wide_flops = 0;
  double attention_flops = 0;  // scores and weighted sums over the live key slots
  double indexer_flops = 0;    // the lightning indexer's scores over its keys
  StepWork& operator+=(const StepWork& o);
};

// The computed part of a step's work for one sequence: `tokens` new
// tokens at positions [from, from + tokens), logits for every token
// (decode) or only the last (a prefill chunk).
StepWork sequence_step_work(const DeepseekV4& m, int64_t from, int64_t tokens, bool prefill_chunk);

// Multiply-adds x 2 a token costs in the linears: every main linear, the
// routed experts' top-k share, and the head when `with_head`.
double linear_flops_per_token(const DeepseekV4& m, bool with_head);

// FLOP/s of each kernel class on all of this machine's threads, best of
// three: GEMMs on prefill-sized problems (256 rows, 2048 x 2048), sink
// attention of 16 heads over 256 cached KV rows, the indexer's head dots.
struct KernelPeaks {
  double fp8_gemm = 0, fp4_gemm = 0, bf16_gemm = 0, f32_gemm = 0, attention = 0, indexer = 0;
  double fp8_unrounded_gemm = 0;  // FP8 panels, f32 inputs (f32 multiply-adds)
  // The f32 multiply-add class (StepWork::wide_flops) at its fastest
  // kernel's peak: a roofline that errs short.
  double wide_gemm() const { return bf16_gemm > fp8_unrounded_gemm ? bf16_gemm : fp8_unrounded_gemm; }
};
KernelPeaks measure_kernel_peaks(const DeepseekV4& m, kernels::Numerics numerics);

// The step's time at `bandwidth` (bytes/s) and at the peaks; its roofline
// is the larger.
struct RooflineTime {
  double memory_s = 0, compute_s = 0;
  double roofline_s() const { return memory_s > compute_s ? memory_s : compute_s; }
};
RooflineTime roofline_time(const StepWork& w, double bandwidth, const KernelPeaks& peaks);

// The distinct weight bytes the kernels report (meter_read) while it is
// installed, from any thread: overlapping reads count once.
class UniqueWeightBytes : public WorkMeter {
 public:
  void read(const void* at, int64_t bytes) override;
  double total() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<uintptr_t, uintptr_t>> spans_;
};

// Memory read bandwidth, bytes/s: a buffer far larger than the caches read
// on every thread, best of three. The buffer is kept, so measuring again
// next to each row costs only the reads.
class BandwidthProbe {
 public:
  BandwidthProbe();
  double measure();

 private:
  std::vector<uint64_t> buf_;
};

}  // namespace dsv4::app
