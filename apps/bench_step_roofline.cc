#include "bench_step_roofline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "base/thread_pool.h"
#include "kernels/cache_rows.h"
#include "kernels/kernels.h"
#include "model/cache_geometry.h"
#include "ops/linear.h"

namespace dsv4::app {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Best FLOP/s of three timed calls of `run`, which does `flops`.
template <class Run>
double best_of_three(double flops, Run run) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    run();
    best = std::max(best, flops / seconds_since(t0));
  }
  return best;
}

// A GEMM on a prefill-sized problem (256 rows, 2048 x 2048) with random
// weights in `format` (finite codes, unit scales); FP8 and FP4 panels
// take their input rounded (dot products) unless `unrounded`.
double gemm_peak(WeightFormat format, kernels::Numerics numerics, bool unrounded = false) {
  const int64_t m = 256, n = 2048, k = 2048;
  Linear l;
  l.out = n;
  l.in = k;
  std::mt19937 rng(1);
  if (format == WeightFormat::kBf16) {
    l.format = format;
    l.codes.resize(n * k * 2);
    for (int64_t i = 0; i < n * k; ++i) {  // bf16 of magnitudes near 1, either sign
      l.codes[2 * i] = static_cast<uint8_t>(rng());
      l.codes[2 * i + 1] = static_cast<uint8_t>(0x3F | (rng() & 0x80));
    }
  } else if (format == WeightFormat::kFp8Block || format == WeightFormat::kFp4Block) {
    const bool fp4 = format == WeightFormat::kFp4Block;
    l.format = format;
    l.round_input = !unrounded;
    l.codes.resize(n * k);
    for (auto& c : l.codes) c = static_cast<uint8_t>(fp4 ? rng() % 16 : rng() % 0x7E);
    l.scales.assign(n * (k / (fp4 ? 32 : 128)), 127);
  } else {
    l.w.resize(n * k);
    for (float& v : l.w) v = static_cast<float>(rng() % 1000) / 1000.0f - 0.5f;
  }
  l.pack();
  std::vector<float> x(m * k), y(m * n);
  for (float& v : x) v = static_cast<float>(rng() % 1000) / 500.0f - 1.0f;
  return best_of_three(2.0 * m * n * k,
                       [&] { linear_forward(kernels::kernels_for(numerics), l, x.data(), m, y.data()); });
}

// Random values stored as cache rows by `store` (rows of `bytes`).
template <class Store>
std::vector<uint8_t> random_rows(int64_t rows, int64_t dim, int64_t bytes, Store store) {
  std::mt19937 rng(2);
  std::vector<float> x(dim);
  std::vector<uint8_t> out(rows * bytes);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : x) v = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
    store(x.data(), &out[r * bytes]);
  }
  return out;
}

std::vector<float> random_floats(int64_t n) {
  std::mt19937 rng(3);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
  return v;
}

// Sink attention of 16 heads over 256 KV rows in the model's format, one
// call per task, 64 tasks over the pool.
double attention_peak(const ModelConfig& c, const kernels::Kernels& k) {
  const kernels::KvRowFormat f = CacheGeometry::of(c).kv_row;
  const int64_t heads = kernels::kPanel, slots = 256, tasks = 64, dim = f.dim();
  const std::vector<uint8_t> rows =
      random_rows(slots, dim, f.bytes(), [&](const float* x, uint8_t* row) { k.store_kv_row(x, f, row); });
  std::vector<const uint8_t*> keys(slots);
  for (int64_t j = 0; j < slots; ++j) keys[j] = &rows[j * f.bytes()];
  const std::vector<float> q = random_floats(heads * dim), sinks(heads, 0.0f);
  return best_of_three(4.0 * heads * slots * dim * tasks, [&] {
    parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
      std::vector<float> scratch(kernels::sink_attention_scratch(heads, slots, dim)), out(heads * dim);
      for (int64_t t = t0; t < t1; ++t)
        k.sink_attention_heads(q.data(), heads, keys.data(), slots, f, sinks.data(), 0.05f, scratch.data(),
                               out.data());
    });
  });
}

// The indexer's head dots: its heads against 1024 FP4 keys, 64 tasks; the
// queries through FP4 as the model's are.
double indexer_peak(const ModelConfig& c, const kernels::Kernels& k) {
  const int64_t heads = c.index_n_heads, dim = c.index_head_dim, keys_n = 1024, tasks = 64;
  if (heads == 0 || dim == 0) return 0;
  const int64_t bytes = kernels::index_row_bytes(dim);
  const std::vector<uint8_t> rows =
      random_rows(keys_n, dim, bytes, [&](const float* x, uint8_t* row) { kernels::store_index_row(x, dim, row); });
  std::vector<const uint8_t*> keys(keys_n);
  for (int64_t j = 0; j < keys_n; ++j) keys[j] = &rows[j * bytes];
  std::vector<float> q = random_floats(heads * dim);
  kernels::fp4_quant_dequant(q.data(), heads * dim, kernels::kIndexScaleBlock);
  return best_of_three(2.0 * heads * dim * keys_n * tasks, [&] {
    parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
      std::vector<float> scratch(kernels::head_dots_scratch(heads, dim)), dots(keys_n * heads);
      for (int64_t t = t0; t < t1; ++t) k.head_dots(q.data(), heads, keys.data(), keys_n, dim, scratch.data(), dots.data());
    });
  });
}

}  // namespace

StepWork& StepWork::operator+=(const StepWork& o) {
  weight_bytes += o.weight_bytes;
  kv_bytes += o.kv_bytes;
  fp8_flops += o.fp8_flops;
  fp4_flops += o.fp4_flops;
  wide_flops += o.wide_flops;
  attention_flops += o.attention_flops;
  indexer_flops += o.indexer_flops;
  return *this;
}

double linear_flops_per_token(const DeepseekV4& m, bool with_head) {
  const ModelConfig& c = m.config();
  double flops = 0;
  m.weights().for_each_linear([&](const Linear& l, LinearKind kind) {
    const double f = 2.0 * static_cast<double>(l.out) * static_cast<double>(l.in);
    if (kind == LinearKind::kMain) flops += f;
    if (kind == LinearKind::kRoutedExpert) flops += f * c.n_activated_experts / c.n_routed_experts;
    if (kind == LinearKind::kHead && with_head) flops += f;
  });
  return flops;
}

StepWork sequence_step_work(const DeepseekV4& m, int64_t from, int64_t tokens, bool prefill_chunk) {
  const ModelConfig& c = m.config();
  const CacheGeometry g = CacheGeometry::of(c);
  StepWork w;
  m.weights().for_each_linear([&](const Linear& l, LinearKind kind) {
    if (kind == LinearKind::kMtp) return;
    // Each token runs every main linear and its top-k of the routed
    // experts; the head runs for the tokens whose logits are wanted.
    double f = 2.0 * static_cast<double>(l.out) * static_cast<double>(l.in);
    if (kind == LinearKind::kRoutedExpert) f *= static_cast<double>(c.n_activated_experts) / c.n_routed_experts;
    f *= kind == LinearKind::kHead && prefill_chunk ? 1 : static_cast<double>(tokens);
    // The kernel class: dot products on rounded inputs (FP4 and FP8 or
    // int8 panels), else f32 multiply-adds (BF16 and f32 panels, and FP8
    // panels the reference multiplies unrounded inputs by: wo_a, the
    // compressors' projections, which run the f32-input FP8 kernel).
    if (l.round_input) (l.format == WeightFormat::kFp4Block ? w.fp4_flops : w.fp8_flops) += f;
    else w.wide_flops += f;
  });
  const int64_t to = from + tokens, win = c.window_size;
  for (int l = 0; l < c.n_layers; ++l) {
    const int ratio = c.compress_ratios[l];
    const bool indexer = g.layers[l].indexer;
    // Each token's live key slots: its window, then its compressed rows
    // (the indexer's top-k of them where the layer has one).
    for (int64_t t = from; t < to; ++t) {
      const int64_t visible = ratio ? (t + 1) / ratio : 0;
      const int64_t compressed = indexer ? std::min<int64_t>(c.index_topk, visible) : visible;
      w.attention_flops += 4.0 * c.n_heads * c.head_dim * static_cast<double>(std::min(t + 1, win) + compressed);
      if (indexer) w.indexer_flops += 2.0 * c.index_n_heads * c.index_head_dim * static_cast<double>(visible);
    }
    // Rows read, each once: the window rows the step's tokens see, the
    // compressed rows (all the indexer may pick for a chunk, its top-k for
    // one token) and every index key.
    w.kv_bytes += static_cast<double>(to - std::max<int64_t>(0, from - win + 1)) * g.window_row_bytes;
    if (!ratio) continue;
    const int64_t visible = to / ratio;
    const int64_t read = indexer ? std::min<int64_t>(visible, tokens * c.index_topk) : visible;
    w.kv_bytes += static_cast<double>(read) * g.compressed_row_bytes;
    if (indexer) w.kv_bytes += static_cast<double>(visible) * g.index_row_bytes;
  }
  return w;
}

KernelPeaks measure_kernel_peaks(const DeepseekV4& m, kernels::Numerics numerics) {
  const kernels::Kernels& k = kernels::kernels_for(numerics);
  KernelPeaks p;
  p.fp8_gemm = gemm_peak(WeightFormat::kFp8Block, numerics);
  p.fp4_gemm = gemm_peak(WeightFormat::kFp4Block, numerics);
  p.bf16_gemm = gemm_peak(WeightFormat::kBf16, numerics);
  p.fp8_unrounded_gemm = gemm_peak(WeightFormat::kFp8Block, numerics, true);
  p.f32_gemm = gemm_peak(WeightFormat::kDense, numerics);
  p.attention = attention_peak(m.config(), k);
  p.indexer = indexer_peak(m.config(), k);
  return p;
}

RooflineTime roofline_time(const StepWork& w, double bandwidth, const KernelPeaks& p) {
  RooflineTime t;
  t.memory_s = (w.weight_bytes + w.kv_bytes) / bandwidth;
  t.compute_s = w.fp8_flops / p.fp8_gemm + w.fp4_flops / p.fp4_gemm + w.wide_flops / p.wide_gemm() +
                w.attention_flops / p.attention + (p.indexer > 0 ? w.indexer_flops / p.indexer : 0.0);
  return t;
}

void UniqueWeightBytes::read(const void* at, int64_t bytes) {
  if (bytes <= 0) return;
  const auto begin = reinterpret_cast<uintptr_t>(at);
  std::lock_guard<std::mutex> lock(mu_);
  spans_.emplace_back(begin, begin + static_cast<uintptr_t>(bytes));
}

double UniqueWeightBytes::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<uintptr_t, uintptr_t>> s = spans_;
  std::sort(s.begin(), s.end());
  double total = 0;
  uintptr_t covered = 0;  // the end of the union so far
  for (const auto& [b, e] : s) {
    const uintptr_t from = std::max(b, covered);
    if (e > from) total += static_cast<double>(e - from);
    covered = std::max(covered, e);
  }
  return total;
}

BandwidthProbe::BandwidthProbe() : buf_(int64_t{1} << 27) {  // 1 GiB of uint64
  const auto words = static_cast<int64_t>(buf_.size());
  parallel_for(words, 1 << 16, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) buf_[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  });
}

double BandwidthProbe::measure() {
  const auto words = static_cast<int64_t>(buf_.size());
  std::vector<uint64_t> partial(1024, 0);
  const double best = best_of_three(8.0 * static_cast<double>(words), [&] {
    parallel_for(1024, 1, [&](int64_t a, int64_t b) {
      for (int64_t c = a; c < b; ++c) {
        uint64_t acc = 0;
        const uint64_t* p = buf_.data() + c * (words / 1024);
        for (int64_t i = 0; i < words / 1024; ++i) acc ^= p[i];
        partial[c] = acc;
      }
    });
  });
  uint64_t sink = 0;
  for (uint64_t v : partial) sink ^= v;
  if (sink == 42) std::fputs("", stderr);  // keep the reads
  return best;
}

}  // namespace dsv4::app
