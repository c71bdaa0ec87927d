// dsv4 bench (throughput): prefill and decode speed at chosen context
// lengths and batch sizes, each row timing only its own interval (the
// contexts grow incrementally, like ds4-bench), in exact and fast numerics
// side by side, next to what this machine can do: memory read bandwidth and
// the GEMM kernels' peak, measured in the same run; and where a decode step
// and a prefill chunk spend their time, by phase of the model.
#include "bench_throughput.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/phase_timer.h"
#include "bench_peer.h"
#include "bench_step_roofline.h"
#include "base/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kv/kv_cache_manager.h"
#include "model/deepseek_v4.h"
#include "checkpoint/released_configs.h"
#include "ops/linear.h"

namespace dsv4::app {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The weight bytes a plain decode step reads per token at batch 1: the main
// model's linears, the routed experts it activates and the head (not the
// MTP block, not the embedding table's other rows).
struct Row {
  std::string phase;
  int64_t batch = 0, ctx_from = 0, ctx_to = 0, tokens = 0;
  double seconds = 0;
  double bandwidth = 0;          // measured just before the row
  std::vector<StepWork> steps;   // each timed step's work (a prefill chunk, a decode step)
  double tok_s() const { return seconds > 0 ? tokens / seconds : 0.0; }
};

// A prefill chunk's phases: tokens [from, to) of the sequence.
struct ChunkPhases {
  int64_t from = 0, to = 0;
  std::array<double, kNumPhases> seconds{};
};

// One numerics' run over the contexts and batch sizes, and the phases of
// the last prefill chunk of each row (the longest context it reached) and
// of the first decode step at each batch size.
struct Run {
  kernels::Numerics numerics;
  std::vector<Row> rows;
  std::vector<ChunkPhases> prefill_phases;
  std::vector<std::pair<int64_t, std::array<double, kNumPhases>>> decode_phases;  // batch -> seconds
  int64_t kv_bytes = 0, kv_context = 0;
};

std::array<double, kNumPhases> timed_phases(const std::function<Status()>& step, Status* st) {
  PhaseTimer::reset();
  PhaseTimer::enable(true);
  *st = step();
  PhaseTimer::enable(false);
  return PhaseTimer::totals();
}

// Runs `step` with the weight bytes its kernels stream counted; returns them.
double metered(const std::function<void()>& step) {
  UniqueWeightBytes bytes;
  {
    WorkMeter::ProcessScope scope(&bytes);
    step();
  }
  return bytes.total();
}

StatusOr<Run> run_rows(DeepseekV4& m, kernels::Numerics numerics, const std::vector<int64_t>& contexts,
                       const std::vector<int64_t>& batches, int64_t gen, BandwidthProbe& probe) {
  m.set_numerics(numerics);
  const ModelConfig& c = m.config();
  Run run;
  run.numerics = numerics;
  std::mt19937 rng(7);
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
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
    Row pre{"prefill", 1, at, L, 0, 0, 0, {}};
    if (at == 0) {
      // Warm-up, not timed, as the decode rows have: a first chunk would
      // also time the page faults of its activation scratch (kept from then
      // on, base/scratch.h), which a serving process pays once at start.
      ContiguousCache warm = m.new_sequence();
      const std::vector<int32_t> t = random_tokens(std::min<int64_t>(2048, L));
      ForwardBatch fb;
      fb.add(&warm, t.data(), static_cast<int64_t>(t.size()), L);
      ForwardOutput out;
      DSV4_RETURN_IF_ERROR(m.forward(fb, &out));
    }
    pre.bandwidth = probe.measure();
    for (int64_t b = 0; b < max_batch; ++b) {
      const std::vector<int32_t> t = random_tokens(L - at);
      for (int64_t s0 = 0; s0 < L - at; s0 += 2048) {
        ForwardBatch fb;
        const int64_t n = std::min<int64_t>(2048, L - at - s0);
        fb.add(&seqs[b], t.data() + s0, n, L);
        ForwardOutput out;
        Status st;
        const auto t0 = Clock::now();
        double weight_bytes = 0;
        if (b == 0) {
          // The timed sequence's chunks count their weight bytes as they
          // run (a lock and a few words per kernel call: noise next to a
          // chunk's seconds).
          weight_bytes = metered([&] {
            if (s0 + n == L - at)
              run.prefill_phases.push_back({at + s0, at + s0 + n, timed_phases([&] { return m.forward(fb, &out); }, &st)});
            else st = m.forward(fb, &out);
          });
        } else {
          st = m.forward(fb, &out);
        }
        DSV4_RETURN_IF_ERROR(st);
        if (b != 0) continue;
        pre.seconds += seconds_since(t0), pre.tokens += n;
        pre.steps.push_back(sequence_step_work(m, at + s0, n, true));
        pre.steps.back().weight_bytes = weight_bytes;
      }
    }
    at = L;
    if (pre.tokens) run.rows.push_back(pre);
    // Decode: each batch size steps `gen` tokens from L, then rewinds.
    for (int64_t B : batches) {
      std::vector<ContiguousCache> copies(seqs.begin(), seqs.begin() + B);
      Row dec{"decode", B, L, L + gen, 0, 0, 0, {}};
      dec.bandwidth = probe.measure();
      double weight_bytes = 0;  // the warm-up step's, metered (the timed steps are not)
      for (int64_t s = -1; s < gen; ++s) {  // step -1: warm-up, not timed
        ForwardBatch fb;
        const std::vector<int32_t> t = random_tokens(B);
        for (int64_t b = 0; b < B; ++b) fb.add(&copies[b], &t[b], 1);
        ForwardOutput out;
        Status st;
        const auto t0 = Clock::now();
        if (s == 0 && L == contexts.front())
          run.decode_phases.emplace_back(B, timed_phases([&] { return m.forward(fb, &out); }, &st));
        else if (s < 0) weight_bytes = metered([&] { st = m.forward(fb, &out); });
        else st = m.forward(fb, &out);
        DSV4_RETURN_IF_ERROR(st);
        if (s < 0) continue;
        dec.seconds += seconds_since(t0), dec.tokens += B;
        StepWork work;
        for (int64_t b = 0; b < B; ++b) work += sequence_step_work(m, L + 1 + s, 1, false);
        work.weight_bytes = weight_bytes;
        dec.steps.push_back(work);
      }
      dec.ctx_to = L + gen + 1;
      run.rows.push_back(dec);
    }
  }
  run.kv_bytes = seqs[0].bytes();
  run.kv_context = at;
  return run;
}

// What a row is measured against: prefill's linear FLOP/s against the GEMM
// peak, decode at batch 1 against the memory roofline.
struct Limits {
  double prefill_flops = 0, gemm_peak = 0, roofline_tok_s = 0;
  double of(const std::string& phase, int64_t batch, double tok_s) const {
    if (phase == "prefill") return tok_s * prefill_flops / gemm_peak;
    return batch == 1 ? tok_s / roofline_tok_s : 0.0;
  }
};

// llama.cpp's rows next to ours (the same contexts, batches, steps and
// threads); false when the peer could not run.
bool print_peer(const ThroughputOptions& o, const Run& ours, const Limits& limits) {
  PeerOptions p;
  p.harness = o.peer_harness.empty() ? default_peer_harness() : o.peer_harness;
  p.gguf = o.peer_gguf;
  p.contexts = o.contexts;
  p.batches = o.batches;
  p.gen = o.gen;
  p.threads = ThreadPool::global().num_threads();
  std::printf("llama.cpp on the same weights (%s, %d threads, same rows):\n", p.gguf.c_str(), p.threads);
  auto rows = run_llamacpp_peer(p);
  if (!rows.ok()) {
    std::printf("  not run: %s\n", rows.status().message().c_str());
    return false;
  }
  const char* mode = kernels::numerics_name(ours.numerics);
  std::printf("  %-8s %6s %14s %16s %8s %12s %-5s %16s\n", "phase", "batch", "context", "llama.cpp tok/s",
              "vs limit", "dsv4 tok/s", mode, "dsv4 / llama.cpp");
  for (const PeerRow& r : *rows) {
    if (r.phase != "load") continue;
    std::printf("  load: llama.cpp %.2f s (model and context; it maps the file and reads weights as first used), "
                "dsv4 %.2f s (every weight read and packed)\n",
                r.seconds, o.load_seconds);
  }
  for (const PeerRow& r : *rows) {
    if (r.phase == "load") continue;
    const Row* mine = nullptr;
    for (const Row& m : ours.rows)
      if (m.phase == r.phase && m.batch == r.batch && m.ctx_from == r.ctx_from) mine = &m;
    char pct[32] = "";
    if (limits.of(r.phase, r.batch, r.tok_s()) > 0)
      std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * limits.of(r.phase, r.batch, r.tok_s()));
    const std::string ctx = std::to_string(r.ctx_from) + "-" + std::to_string(r.ctx_to);
    std::printf("  %-8s %6lld %14s %16.1f %8s %18.1f", r.phase.c_str(), static_cast<long long>(r.batch), ctx.c_str(),
                r.tok_s(), pct, mine ? mine->tok_s() : 0.0);
    if (mine) std::printf(" %15.2fx", mine->tok_s() / r.tok_s());
    std::printf("\n");
  }
  for (const PeerRow& r : *rows) {
    if (r.phase != "decode" || r.batch == 1) continue;
    for (const PeerRow& one : *rows)
      if (one.phase == "decode" && one.batch == 1 && one.ctx_from == r.ctx_from)
        std::printf("llama.cpp: decode batch %lld at context %lld: %.2fx the tokens/s of batch 1\n",
                    static_cast<long long>(r.batch), static_cast<long long>(r.ctx_from), r.tok_s() / one.tok_s());
  }
  return true;
}

// A row's roofline: the sum of its steps', each the larger of its bytes at
// the bandwidth measured next to the row and its FLOPs at the peaks.
double row_roofline_seconds(const Row& r, const KernelPeaks& peaks) {
  double s = 0;
  for (const StepWork& w : r.steps) s += roofline_time(w, r.bandwidth, peaks).roofline_s();
  return s;
}

// Per row, one step's average work, its time at the bandwidth and at the
// peaks, and the share of that roofline the row achieved.
void print_step_rooflines(const Run& run, const KernelPeaks& peaks) {
  std::printf("roofline per step, %s (a step: a prefill chunk or a decode step; bytes each read once a step, at the "
              "bandwidth measured before the row; FLOPs at the kernel peaks above):\n",
              kernels::numerics_name(run.numerics));
  std::printf("  %-8s %5s %12s %6s %10s %8s %9s %9s %9s %9s %9s %10s %10s %10s %10s %7s\n", "phase", "batch",
              "context", "GB/s", "weight MiB", "KV MiB", "FP8 GF", "FP4 GF", "FMA GF", "attn GF", "index GF",
              "memory ms", "flops ms", "roof ms", "step ms", "of roof");
  for (const Row& r : run.rows) {
    if (r.steps.empty()) continue;
    StepWork sum;
    RooflineTime t;
    for (const StepWork& w : r.steps) {
      sum += w;
      const RooflineTime one = roofline_time(w, r.bandwidth, peaks);
      t.memory_s += one.memory_s, t.compute_s += one.compute_s;
    }
    const double n = static_cast<double>(r.steps.size()), roof = row_roofline_seconds(r, peaks);
    const std::string ctx = std::to_string(r.ctx_from) + "-" + std::to_string(r.ctx_to);
    std::printf(
        "  %-8s %5lld %12s %6.1f %10.2f %8.3f %9.4f %9.4f %9.4f %9.4f %9.4f %10.3f %10.3f %10.3f %10.3f %6.1f%%\n",
                r.phase.c_str(), static_cast<long long>(r.batch), ctx.c_str(), r.bandwidth / 1e9,
                sum.weight_bytes / n / 1048576.0, sum.kv_bytes / n / 1048576.0, sum.fp8_flops / n / 1e9,
                sum.fp4_flops / n / 1e9, sum.wide_flops / n / 1e9, sum.attention_flops / n / 1e9,
                sum.indexer_flops / n / 1e9,
                t.memory_s / n * 1e3, t.compute_s / n * 1e3, roof / n * 1e3, r.seconds / n * 1e3,
                100.0 * roof / r.seconds);
  }
}

// A step's phases as shares of its time.
void print_phases(const char* what, const std::array<double, kNumPhases>& seconds) {
  double total = 0;
  for (double s : seconds) total += s;
  std::printf("  %-30s %8.1f ms:", what, total * 1e3);
  for (int p = 0; p < kNumPhases; ++p)
    if (seconds[p] > 0.0005 * total) std::printf(" %s %.1f%%", phase_name(static_cast<Phase>(p)), 100 * seconds[p] / total);
  std::printf("\n");
}

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

double decode_bytes_per_token(const DeepseekV4& m) {
  const ModelConfig& c = m.config();
  double bytes = 0;
  m.weights().for_each_linear([&](const Linear& l, LinearKind kind) {
    const double b = static_cast<double>(l.resident_bytes());
    if (kind == LinearKind::kMain || kind == LinearKind::kHead) bytes += b;
    if (kind == LinearKind::kRoutedExpert) bytes += b * c.n_activated_experts / c.n_routed_experts;
  });
  return bytes;
}

double read_bandwidth() { return BandwidthProbe().measure(); }

int bench_throughput(DeepseekV4& m, const ThroughputOptions& o) {
  const ModelConfig& c = m.config();
  const std::vector<int64_t>& contexts = o.contexts;
  const std::vector<int64_t>& batches = o.batches;
  const std::vector<kernels::Numerics>& numerics = o.numerics;
  const int64_t gen = o.gen;
  const std::string& csv = o.csv;
  for (int64_t L : contexts)
    if (L < 1 || L + gen + 1 > c.max_position_embeddings) {
      std::fprintf(stderr, "dsv4 bench: context %lld + %lld decode steps exceeds the model's %d positions\n",
                   static_cast<long long>(L), static_cast<long long>(gen), c.max_position_embeddings);
      return 2;
    }
  std::string modes;
  for (kernels::Numerics n : numerics) modes += std::string(modes.empty() ? "" : " and ") + kernels::numerics_name(n);
  std::printf("dsv4 bench: %s (%s), kernels %s, numerics %s, %d threads\n", o.name.c_str(), c.summary().c_str(),
              kernels::isa_name(kernels::active_isa()), modes.c_str(), ThreadPool::global().num_threads());
  BandwidthProbe probe;
  double bandwidth = probe.measure();
  std::vector<KernelPeaks> kernel_peaks;
  std::vector<double> peaks;  // the FP8-panel GEMM's, per numerics
  std::printf("machine: memory read %.2f GB/s; GEMM kernel peak (FP8 panels, BF16-pair inputs: what prefill's "
              "linears run)",
              bandwidth / 1e9);
  for (kernels::Numerics n : numerics) {
    kernel_peaks.push_back(measure_kernel_peaks(m, n));
    peaks.push_back(kernel_peaks.back().fp8_gemm);
    std::printf(" %.2f GFLOP/s %s", peaks.back() / 1e9, kernels::numerics_name(n));
  }
  std::printf(", f32 panels %.2f GFLOP/s\n", kernel_peaks.back().f32_gemm / 1e9);
  for (size_t k = 0; k < numerics.size(); ++k)
    std::printf("kernel peaks, %s (GFLOP/s, all threads): FP8 GEMM %.1f, FP4 GEMM %.1f, BF16 GEMM %.1f, FP8 GEMM of "
                "unrounded inputs %.1f, sink attention %.1f (16 heads x 256 cached rows), indexer %.1f\n",
                kernels::numerics_name(numerics[k]), kernel_peaks[k].fp8_gemm / 1e9, kernel_peaks[k].fp4_gemm / 1e9,
                kernel_peaks[k].bf16_gemm / 1e9, kernel_peaks[k].fp8_unrounded_gemm / 1e9,
                kernel_peaks[k].attention / 1e9, kernel_peaks[k].indexer / 1e9);
  const double prefill_flops = linear_flops_per_token(m, false);
  std::printf("linears: %.2f GFLOP per prefill token, %.2f per decode token (with the head)\n", prefill_flops / 1e9,
              linear_flops_per_token(m, true) / 1e9);
  const double per_token_bytes = decode_bytes_per_token(m);
  std::printf("weights %.2f MiB resident; a decode token reads %.2f MiB -> roofline %.1f tok/s at batch 1\n",
              m.weights().resident_bytes() / 1048576.0, per_token_bytes / 1048576.0, bandwidth / per_token_bytes);

  std::vector<Run> runs;
  for (kernels::Numerics n : numerics) {
    StatusOr<Run> run = run_rows(m, n, contexts, batches, gen, probe);
    if (!run.ok()) {
      std::fprintf(stderr, "dsv4 bench: %s\n", run.status().message().c_str());
      return 2;
    }
    runs.push_back(std::move(*run));
  }

  // The bandwidth again after the rows (a shared machine's bandwidth moves
  // from minute to minute); the higher of the two is the roofline.
  const double bandwidth_after = probe.measure();
  std::printf("memory read %.2f GB/s after the rows; the roofline uses %.2f GB/s (%.1f tok/s at batch 1)\n",
              bandwidth_after / 1e9, std::max(bandwidth, bandwidth_after) / 1e9,
              std::max(bandwidth, bandwidth_after) / per_token_bytes);
  bandwidth = std::max(bandwidth, bandwidth_after);
  // Prefill rows against the GEMM peak of their numerics, decode rows at
  // batch 1 against the memory roofline.
  auto limits = [&](size_t run) { return Limits{prefill_flops, peaks[run], bandwidth / per_token_bytes}; };
  auto ratio = [&](const Row& r, size_t run) { return limits(run).of(r.phase, r.batch, r.tok_s()); };
  std::printf("  %-8s %6s %14s %10s", "phase", "batch", "context", "tokens");
  for (const Run& run : runs) std::printf(" %10s tok/s %8s", kernels::numerics_name(run.numerics), "vs limit");
  if (runs.size() == 2) std::printf(" %10s", "fast/exact");
  std::printf("\n");
  for (size_t i = 0; i < runs[0].rows.size(); ++i) {
    const Row& r = runs[0].rows[i];
    const std::string ctx = std::to_string(r.ctx_from) + "-" + std::to_string(r.ctx_to);
    std::printf("  %-8s %6lld %14s %10lld", r.phase.c_str(), static_cast<long long>(r.batch), ctx.c_str(),
                static_cast<long long>(r.tokens));
    for (size_t k = 0; k < runs.size(); ++k) {
      const Row& rk = runs[k].rows[i];
      char pct[32] = "";
      if (ratio(rk, k) > 0) std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * ratio(rk, k));
      std::printf(" %16.1f %8s", rk.tok_s(), pct);
    }
    if (runs.size() == 2) std::printf(" %9.2fx", runs[1].rows[i].tok_s() / r.tok_s());
    std::printf("\n");
  }
  std::printf("  (prefill: linear FLOP/s vs the GEMM peak of its numerics; decode batch 1: vs the memory roofline)\n");
  for (size_t k = 0; k < runs.size(); ++k) print_step_rooflines(runs[k], kernel_peaks[k]);
  for (const Run& run : runs) {
    // Batch scaling at each context, and long-context decode against the
    // shortest context, at batch 1.
    const char* mode = kernels::numerics_name(run.numerics);
    const Row* first_decode1 = nullptr;
    for (const Row& r : run.rows) {
      if (r.phase != "decode") continue;
      if (r.batch == 1 && !first_decode1) first_decode1 = &r;
      if (r.batch == 1 && first_decode1 != &r)
        std::printf("%s: decode at context %lld: %.2fx the tokens/s at context %lld\n", mode,
                    static_cast<long long>(r.ctx_from), r.tok_s() / first_decode1->tok_s(),
                    static_cast<long long>(first_decode1->ctx_from));
      if (r.batch == 1) continue;
      for (const Row& one : run.rows)
        if (one.phase == "decode" && one.batch == 1 && one.ctx_from == r.ctx_from)
          std::printf("%s: decode batch %lld at context %lld: %.2fx the tokens/s of batch 1\n", mode,
                      static_cast<long long>(r.batch), static_cast<long long>(r.ctx_from), r.tok_s() / one.tok_s());
    }
  }
  const bool peer_ok = o.peer_gguf.empty() || print_peer(o, runs.back(), limits(runs.size() - 1));
  std::printf("time by phase (the last prefill chunk of each row, one decode step at context %lld):\n",
              static_cast<long long>(contexts.front()));
  for (const Run& run : runs) {
    const std::string mode = kernels::numerics_name(run.numerics);
    for (const ChunkPhases& chunk : run.prefill_phases)
      print_phases((mode + " prefill " + std::to_string(chunk.from) + "-" + std::to_string(chunk.to)).c_str(),
                   chunk.seconds);
    for (const auto& [batch, phases] : run.decode_phases)
      print_phases((mode + " decode batch " + std::to_string(batch)).c_str(), phases);
  }
  std::printf("KV cache: %.0f bytes per token at %lld context\n",
              runs[0].kv_bytes / static_cast<double>(std::max<int64_t>(1, runs[0].kv_context)),
              static_cast<long long>(runs[0].kv_context));
  print_kv_bytes_per_token(c);
  if (!csv.empty()) {
    std::ofstream f(csv);
    f << "numerics,phase,batch,ctx_from,ctx_to,tokens,seconds,tok_s,mem_gbps,gemm_gflops,vs_limit,row_mem_gbps,"
         "roofline_seconds,of_roofline\n";
    for (size_t k = 0; k < runs.size(); ++k)
      for (const Row& r : runs[k].rows) {
        const double roof = row_roofline_seconds(r, kernel_peaks[k]);
        f << kernels::numerics_name(runs[k].numerics) << ',' << r.phase << ',' << r.batch << ',' << r.ctx_from << ','
          << r.ctx_to << ',' << r.tokens << ',' << r.seconds << ',' << r.tok_s() << ',' << bandwidth / 1e9 << ','
          << peaks[k] / 1e9 << ',' << ratio(r, k) << ',' << r.bandwidth / 1e9 << ',' << roof << ','
          << roof / r.seconds << '\n';
      }
    std::printf("CSV written to %s\n", csv.c_str());
  }
  return peer_ok ? 0 : 1;
}

}  // namespace dsv4::app
