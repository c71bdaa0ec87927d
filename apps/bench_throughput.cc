// dsv4 bench (throughput): prefill and decode speed at chosen context
// lengths and batch sizes, each row timing only its own interval (the
// contexts grow incrementally, like ds4-bench), next to what this machine
// can do: memory read bandwidth and the GEMM kernel's peak, measured in the
// same run.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/isa.h"
#include "kernels/kernels.h"
#include "kv/kv_cache_manager.h"
#include "model/deepseek_v4.h"
#include "model/released_configs.h"
#include "ops/linear.h"

namespace dsv4::app {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Reads a buffer far larger than the caches, on every thread; bytes / s.
double read_bandwidth() {
  const int64_t words = int64_t{1} << 27;  // 1 GiB of uint64
  std::vector<uint64_t> buf(words);
  parallel_for(words, 1 << 16, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) buf[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  });
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<uint64_t> partial(1024, 0);
    const auto t0 = Clock::now();
    parallel_for(1024, 1, [&](int64_t a, int64_t b) {
      for (int64_t c = a; c < b; ++c) {
        uint64_t acc = 0;
        const uint64_t* p = buf.data() + c * (words / 1024);
        for (int64_t i = 0; i < words / 1024; ++i) acc ^= p[i];
        partial[c] = acc;
      }
    });
    const double s = seconds_since(t0);
    uint64_t sink = 0;
    for (uint64_t v : partial) sink ^= v;
    if (sink == 42) std::fputs("", stderr);  // keep the reads
    best = std::max(best, 8.0 * words / s);
  }
  return best;
}

// A kernel's FLOP/s on a prefill-sized problem (256 rows, 2048 x 2048),
// best of three: the FP8 panels with BF16-pair inputs (what the released
// formats' linears run in prefill) and the f32 panels.
double gemm_peak(WeightFormat format) {
  const int64_t m = 256, n = 2048, k = 2048;
  Linear l;
  l.out = n;
  l.in = k;
  std::mt19937 rng(1);
  if (format == WeightFormat::kFp8Block) {
    l.format = format;
    l.round_input = true;
    l.codes.resize(n * k);
    for (auto& c : l.codes) c = static_cast<uint8_t>(rng() % 0x7E);  // finite e4m3 codes
    l.scales.assign(n * (k / 128), 120);
  } else {
    l.w.resize(n * k);
    for (float& v : l.w) v = static_cast<float>(rng() % 1000) / 1000.0f - 0.5f;
  }
  l.pack();
  std::vector<float> x(m * k), y(m * n);
  for (float& v : x) v = static_cast<float>(rng() % 1000) / 500.0f - 1.0f;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    linear_forward(l, x.data(), m, y.data());
    best = std::max(best, 2.0 * m * n * k / seconds_since(t0));
  }
  return best;
}

// Multiply-adds x 2 a token costs in the linears: every main linear, the
// routed experts' share top-k / experts, and the head when logits are
// wanted (every decode token; only a chunk's last row in prefill).
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

struct Row {
  std::string phase;
  int64_t batch = 0, ctx_from = 0, ctx_to = 0, tokens = 0;
  double seconds = 0;
  double tok_s() const { return tokens / seconds; }
};

// KV bytes per token of one request in the paged cache (rows as FP8/FP4
// codes, its window ring and compressor states included) at 4K, 64K and 1M
// context, for this model and, from the same layout, the released ones.
void print_kv_bytes_per_token(const ModelConfig& model) {
  std::printf("KV bytes per token (paged cache, block 32):\n  %-20s %10s %10s %10s\n", "model", "4K", "64K", "1M");
  auto row = [](const std::string& name, const ModelConfig& c) {
    auto layout = PageLayout::of(CacheGeometry::of(c), 32);
    if (!layout.ok()) {
      std::printf("  %-20s %s\n", name.c_str(), layout.status().message().c_str());
      return;
    }
    std::printf("  %-20s", name.c_str());
    for (int64_t len : {int64_t{4096}, int64_t{65536}, int64_t{1} << 20})
      std::printf(" %10.0f", kv_bytes_per_token(*layout, len));
    std::printf("\n");
  };
  row("this model", model);
  for (const char* name : {"flash", "pro"}) {
    auto c = released_config(name);
    if (c.ok()) row(std::string("DeepSeek-V4-") + (name[0] == 'f' ? "Flash" : "Pro"), *c);
  }
}

}  // namespace

int bench_throughput(const DeepseekV4& m, const std::string& name, const std::vector<int64_t>& contexts,
                     const std::vector<int64_t>& batches, int64_t gen, const std::string& csv) {
  const ModelConfig& c = m.config();
  for (int64_t L : contexts)
    if (L < 1 || L + gen + 1 > c.max_position_embeddings) {
      std::fprintf(stderr, "dsv4 bench: context %lld + %lld decode steps exceeds the model's %d positions\n",
                   static_cast<long long>(L), static_cast<long long>(gen), c.max_position_embeddings);
      return 2;
    }
  std::printf("dsv4 bench: %s (%s), kernels %s, %d threads\n", name.c_str(), c.summary().c_str(),
              kernels::isa_name(kernels::active_isa()), ThreadPool::global().num_threads());
  double bandwidth = read_bandwidth();
  const double peak = gemm_peak(WeightFormat::kFp8Block),
               f32_peak = gemm_peak(WeightFormat::kDense);
  std::printf("machine: memory read %.2f GB/s; GEMM kernel peak %.2f GFLOP/s (FP8/FP4 panels, BF16 dot), "
              "%.2f GFLOP/s (f32 panels)\n",
              bandwidth / 1e9, peak / 1e9, f32_peak / 1e9);
  const double prefill_flops = linear_flops_per_token(m, false);
  std::printf("linears: %.2f GFLOP per prefill token, %.2f per decode token (with the head)\n", prefill_flops / 1e9,
              linear_flops_per_token(m, true) / 1e9);

  // What one decode token must read: every weight but the routed experts
  // and the embedding table (one row of it), plus the experts it activates.
  const ModelWeights& w = m.weights();
  const int64_t experts = w.routed_expert_bytes(), embedding = w.embed.resident_bytes();
  const double per_token_bytes =
      static_cast<double>(w.resident_bytes() - experts - embedding) +
      static_cast<double>(experts) * c.n_activated_experts / c.n_routed_experts;
  std::printf("weights %.2f MiB resident; a decode token reads %.2f MiB -> roofline %.1f tok/s at batch 1\n",
              w.resident_bytes() / 1048576.0, per_token_bytes / 1048576.0, bandwidth / per_token_bytes);

  std::vector<Row> rows;
  std::mt19937 rng(7);
  int64_t max_batch = 1;
  for (int64_t b : batches) max_batch = std::max(max_batch, b);
  std::vector<ContiguousCache> seqs;
  for (int64_t b = 0; b < max_batch; ++b) seqs.push_back(m.new_sequence());
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(n);
    for (auto& v : t) v = static_cast<int32_t>(rng() % c.vocab_size);
    return t;
  };
  int64_t at = 0;  // every sequence's length
  for (int64_t L : contexts) {
    if (L < at) continue;
    // Prefill every sequence from `at` to L, one at a time (a row of batch 1).
    Row pre{"prefill", 1, at, L, 0, 0};
    for (int64_t b = 0; b < max_batch; ++b) {
      const std::vector<int32_t> t = random_tokens(L - at);
      for (int64_t s0 = 0; s0 < L - at; s0 += 2048) {
        ForwardBatch fb;
        const int64_t n = std::min<int64_t>(2048, L - at - s0);
        fb.add(&seqs[b], t.data() + s0, n, L);
        ForwardOutput out;
        const auto t0 = Clock::now();
        const Status st = m.forward(fb, &out);
        if (b == 0) pre.seconds += seconds_since(t0), pre.tokens += n;
        if (!st.ok()) {
          std::fprintf(stderr, "dsv4 bench: %s\n", st.message().c_str());
          return 2;
        }
      }
    }
    at = L;
    if (pre.tokens) rows.push_back(pre);
    // Decode: each batch size steps `gen` tokens from L, then rewinds.
    for (int64_t B : batches) {
      std::vector<ContiguousCache> copies(seqs.begin(), seqs.begin() + B);
      Row dec{"decode", B, L, L + gen, 0, 0};
      for (int64_t s = -1; s < gen; ++s) {  // step -1: warm-up, not timed
        ForwardBatch fb;
        const std::vector<int32_t> t = random_tokens(B);
        for (int64_t b = 0; b < B; ++b) fb.add(&copies[b], &t[b], 1);
        ForwardOutput out;
        const auto t0 = Clock::now();
        const Status st = m.forward(fb, &out);
        if (s >= 0) dec.seconds += seconds_since(t0), dec.tokens += B;
        if (!st.ok()) {
          std::fprintf(stderr, "dsv4 bench: %s\n", st.message().c_str());
          return 2;
        }
      }
      dec.ctx_to = L + gen + 1;
      rows.push_back(dec);
    }
  }

  // The bandwidth again after the rows (a shared machine's bandwidth moves
  // from minute to minute); the higher of the two is the roofline.
  const double bandwidth_after = read_bandwidth();
  std::printf("memory read %.2f GB/s after the rows; the roofline uses %.2f GB/s (%.1f tok/s at batch 1)\n",
              bandwidth_after / 1e9, std::max(bandwidth, bandwidth_after) / 1e9,
              std::max(bandwidth, bandwidth_after) / per_token_bytes);
  bandwidth = std::max(bandwidth, bandwidth_after);
  // Prefill rows against the GEMM peak, decode rows at batch 1 against the
  // memory roofline.
  auto ratio = [&](const Row& r) {
    if (r.phase == "prefill") return r.tok_s() * prefill_flops / peak;
    if (r.batch == 1) return r.tok_s() / (bandwidth / per_token_bytes);
    return 0.0;
  };
  std::printf("  %-8s %6s %14s %10s %12s %10s\n", "phase", "batch", "context", "tokens", "tok/s", "vs limit");
  for (const Row& r : rows) {
    const std::string ctx = std::to_string(r.ctx_from) + "-" + std::to_string(r.ctx_to);
    char pct[32] = "";
    if (ratio(r) > 0) std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * ratio(r));
    std::printf("  %-8s %6lld %14s %10lld %12.1f %10s\n", r.phase.c_str(), static_cast<long long>(r.batch), ctx.c_str(),
                static_cast<long long>(r.tokens), r.tok_s(), pct);
  }
  std::printf("  (prefill: linear FLOP/s vs the FP8 GEMM peak; decode batch 1: vs the memory roofline)\n");
  // Batch scaling at each context, and long-context decode against the
  // shortest context, at batch 1.
  const Row* first_decode1 = nullptr;
  for (const Row& r : rows) {
    if (r.phase != "decode") continue;
    if (r.batch == 1 && !first_decode1) first_decode1 = &r;
    if (r.batch == 1 && first_decode1 != &r)
      std::printf("decode at context %lld: %.2fx the tokens/s at context %lld\n", static_cast<long long>(r.ctx_from),
                  r.tok_s() / first_decode1->tok_s(), static_cast<long long>(first_decode1->ctx_from));
    if (r.batch == 1) continue;
    for (const Row& one : rows)
      if (one.phase == "decode" && one.batch == 1 && one.ctx_from == r.ctx_from)
        std::printf("decode batch %lld at context %lld: %.2fx the tokens/s of batch 1\n",
                    static_cast<long long>(r.batch), static_cast<long long>(r.ctx_from), r.tok_s() / one.tok_s());
  }
  std::printf("KV cache: %.0f bytes per token at %lld context\n",
              seqs[0].bytes() / static_cast<double>(std::max<int64_t>(1, at)), static_cast<long long>(at));
  print_kv_bytes_per_token(c);
  if (!csv.empty()) {
    std::ofstream f(csv);
    f << "phase,batch,ctx_from,ctx_to,tokens,seconds,tok_s,mem_gbps,gemm_gflops,vs_limit\n";
    for (const Row& r : rows)
      f << r.phase << ',' << r.batch << ',' << r.ctx_from << ',' << r.ctx_to << ',' << r.tokens << ',' << r.seconds
        << ',' << r.tok_s() << ',' << bandwidth / 1e9 << ',' << peak / 1e9 << ',' << ratio(r) << '\n';
    std::printf("CSV written to %s\n", csv.c_str());
  }
  return 0;
}

}  // namespace dsv4::app
