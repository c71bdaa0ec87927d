// dsv4 bench --serving: what the engine's serving features buy on a model.
// Speculative decoding with the MTP block (or a DSpark checkpoint's drafter,
// with its draft cost) at K = 1, 3, 7 against plain
// decoding (mean accepted length, decode tokens/s, speed-up, and that the
// greedy tokens are the same) on chat prompts the model answers (a random
// prompt for a model without a chat tokenizer), and time to first token of
// a long prompt cold and after a prefix-cache hit on all but its last tokens.
#include "bench_serving.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "model/contiguous_cache.h"
#include "model/deepseek_v4.h"
#include "runtime/engine.h"

namespace dsv4::app {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct DecodeRun {
  std::vector<int32_t> tokens;
  double decode_seconds = 0;  // after the prompt's step
  int64_t decode_tokens = 0;
  int64_t drafts_proposed = 0, drafts_accepted = 0, verify_chunks = 0;  // summed over the prompts
};

// The prompts one at a time (batch 1), each for up to gen greedy tokens:
// to its end of sentence when they are chat turns the model answers, all
// gen when they are random tokens (nothing to end).
StatusOr<DecodeRun> decode(const DeepseekV4& model, int k, const ServingPrompts& prompts, int64_t gen) {
  DecodeRun run;
  for (const std::vector<int32_t>& prompt : prompts.prompts) {
    EngineOptions o;
    o.scheduler.num_speculative_tokens = k;
    o.scheduler.drafter =
        model.config().has_dspark() ? SchedulerOptions::Drafter::kDSpark : SchedulerOptions::Drafter::kMtp;
    o.scheduler.max_num_seqs = 4;
    o.cache.memory_bytes = int64_t{1} << 30;
    o.cache.enable_prefix_caching = false;
    DSV4_ASSIGN_OR_RETURN(auto engine, Engine::create(&model, o));
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = gen;
    p.ignore_eos = !prompts.chat;
    DSV4_RETURN_IF_ERROR(engine->add_request(prompt, p).status());
    bool prefilled = false;
    Clock::time_point t0;
    while (engine->has_unfinished()) {
      for (const RequestOutput& o : engine->step()) {
        run.tokens.insert(run.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
        if (prefilled) run.decode_tokens += static_cast<int64_t>(o.new_tokens.size());
      }
      if (!prefilled) prefilled = true, t0 = Clock::now();
    }
    run.decode_seconds += seconds(t0);
    const EngineStats& st = engine->stats();
    run.drafts_proposed += st.drafts_proposed;
    run.drafts_accepted += st.drafts_accepted;
    run.verify_chunks += st.verify_chunks;
  }
  return run;
}

// Seconds from adding `prompt` to its first token, on an engine that may
// hold a cached prefix.
double first_token(Engine& engine, const std::vector<int32_t>& prompt, int64_t* cached) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 1;
  p.ignore_eos = true;
  const auto t0 = Clock::now();
  const auto id = engine.add_request(prompt, p);
  if (!id.ok()) return -1;
  while (engine.has_unfinished())
    for (const RequestOutput& o : engine.step()) *cached = o.cached_tokens;
  return seconds(t0);
}

// DSpark: one draft call's time against one target decode step (batch 1,
// rings filled over 256 positions), and the decode speed-up each measured
// speculative step time gives at a per-draft acceptance rate a (drafts
// accepted independently: a step yields (1 - a^(K+1)) / (1 - a) tokens).
void dspark_cost(const DeepseekV4& m, double decode_step, const std::vector<std::pair<int64_t, double>>& step_seconds) {
  const ModelConfig& c = m.config();
  const int64_t width = int64_t{c.dspark_taps()} * c.dim, positions = 256;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> taps(positions * width);
  for (float& v : taps) v = normal(rng);
  ContiguousCache rings(CacheGeometry::of(c), c.dspark_cache_layer(0), c.dspark_stages);
  if (!m.dspark_fill(&rings, taps.data(), positions - 1, 0).ok()) return;
  const int calls = 8;
  std::vector<DSparkDraft> out;
  DSparkCall call;
  call.cache = &rings;
  call.position = positions - 1;
  call.anchor = 1;
  call.tap = &taps[(positions - 1) * width];
  if (!m.dspark_draft({call}, &out).ok()) return;  // warm
  const auto t0 = Clock::now();
  for (int i = 0; i < calls; ++i) (void)m.dspark_draft({call}, &out);
  const double draft = seconds(t0) / calls;
  std::printf("  DSpark draft call %.2f ms = %.1f%% of a target decode step (%.2f ms)\n", draft * 1e3,
              100.0 * draft / decode_step, decode_step * 1e3);
  std::printf("  projected decode speed-up at a per-draft acceptance rate a, from each K's measured step time:\n"
              "  K   step/decode step   a=0.5   a=0.6   a=0.7   a=0.8   a=0.9\n");
  for (const auto& [k, step] : step_seconds) {
    std::printf("  %lld   %6.2fx          ", static_cast<long long>(k), step / decode_step);
    for (double a : {0.5, 0.6, 0.7, 0.8, 0.9})
      std::printf("%5.2fx  ", (1.0 - std::pow(a, static_cast<double>(k + 1))) / (1.0 - a) * decode_step / step);
    std::printf("\n");
  }
}

}  // namespace

int bench_serving(const DeepseekV4& m, const std::string& name, const ServingPrompts& chat_prompts, int64_t ctx,
                  int64_t gen, const std::vector<int64_t>& ks, const std::string& csv) {
  const ModelConfig& c = m.config();
  if (ctx + gen + kMaxDraftTokens + 1 > c.max_position_embeddings || ctx < 2 * kBlockTokens) {
    std::fprintf(stderr,
                 "dsv4 bench: --ctx %lld does not fit: it must be from %lld to %lld (the model's %d positions less "
                 "--gen and the draft rows)\n",
                 static_cast<long long>(ctx), static_cast<long long>(2 * kBlockTokens),
                 static_cast<long long>(c.max_position_embeddings - gen - kMaxDraftTokens - 1), c.max_position_embeddings);
    return 2;
  }
  std::printf("dsv4 bench --serving: %s (%s)\n", name.c_str(), c.summary().c_str());
  std::mt19937 rng(11);
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(n);
    for (auto& v : t) v = static_cast<int32_t>(rng() % c.vocab_size);
    return t;
  };
  std::vector<std::string> lines;

  // Speculative decoding: the model's chat prompts, or one 256-token random
  // prompt, one request at a time.
  ServingPrompts prompts = chat_prompts;
  if (prompts.prompts.empty()) prompts = {{random_tokens(256)}, false, "one 256-token random prompt"};
  auto plain = decode(m, 0, prompts, gen);
  if (!plain.ok()) {
    std::fprintf(stderr, "dsv4 bench: %s\n", plain.status().message().c_str());
    return 2;
  }
  const double base = plain->decode_tokens / plain->decode_seconds;
  std::printf("  speculative decoding (batch 1, %s, up to %lld greedy tokens each)\n", prompts.what.c_str(),
              static_cast<long long>(gen));
  std::printf("  K   accepted/drafted   mean accepted length   decode tok/s   speed-up   same tokens\n");
  std::printf("  0   -                  1.00                   %12.2f   1.00x      -\n", base);
  lines.push_back("speculative,0,0,0,1.00," + std::to_string(base) + ",1.00,1");
  std::vector<std::pair<int64_t, double>> step_seconds;  // K -> seconds per speculative step
  for (int64_t k : ks) {
    if (c.has_dspark() && k > c.dspark_block_size) {
      std::printf("  %lld   (the DSpark drafter proposes %d per step)\n", static_cast<long long>(k), c.dspark_block_size);
      continue;
    }
    auto run = decode(m, static_cast<int>(k), prompts, gen);
    if (!run.ok()) {
      std::fprintf(stderr, "dsv4 bench: %s\n", run.status().message().c_str());
      return 2;
    }
    const DecodeRun& s = *run;
    const double accepted_len = 1.0 + static_cast<double>(s.drafts_accepted) / std::max<int64_t>(1, s.verify_chunks);
    const double tps = run->decode_tokens / run->decode_seconds;
    const bool same = run->tokens == plain->tokens;
    std::printf("  %lld   %5lld/%-5lld        %4.2f                   %12.2f   %4.2fx      %s\n",
                static_cast<long long>(k), static_cast<long long>(s.drafts_accepted),
                static_cast<long long>(s.drafts_proposed), accepted_len, tps, tps / base, same ? "yes" : "NO");
    char buf[200];
    std::snprintf(buf, sizeof buf, "speculative,%lld,%lld,%lld,%.4f,%.4f,%.4f,%d", static_cast<long long>(k),
                  static_cast<long long>(s.drafts_accepted), static_cast<long long>(s.drafts_proposed), accepted_len,
                  tps, tps / base, same ? 1 : 0);
    lines.push_back(buf);
    step_seconds.emplace_back(k, run->decode_seconds / std::max<int64_t>(1, s.verify_chunks));
  }
  if (c.has_dspark()) dspark_cost(m, plain->decode_seconds / std::max<int64_t>(1, plain->decode_tokens), step_seconds);

  // Time to first token at ctx: cold, then a prompt sharing all but its
  // last 64 tokens with it.
  EngineOptions o;
  o.scheduler.max_num_seqs = 4;
  o.scheduler.max_num_batched_tokens = 2048;
  o.cache.memory_bytes = int64_t{2} << 30;
  auto engine = Engine::create(&m, o);
  if (!engine.ok()) {
    std::fprintf(stderr, "dsv4 bench: %s\n", engine.status().message().c_str());
    return 2;
  }
  const std::vector<int32_t> a = random_tokens(ctx);
  std::vector<int32_t> b(a.begin(), a.end() - 64);
  const std::vector<int32_t> tail = random_tokens(64);
  b.insert(b.end(), tail.begin(), tail.end());
  int64_t cached_a = 0, cached_b = 0;
  const double cold = first_token(**engine, a, &cached_a), hit = first_token(**engine, b, &cached_b);
  std::printf("  time to first token at %lld tokens: cold %.3f s (%lld cached), prefix hit %.3f s (%lld cached): "
              "%.1fx faster\n",
              static_cast<long long>(ctx), cold, static_cast<long long>(cached_a), hit, static_cast<long long>(cached_b),
              cold / hit);
  char buf[200];
  std::snprintf(buf, sizeof buf, "ttft,%lld,%lld,%.4f,%lld,%.4f,%.4f", static_cast<long long>(ctx),
                static_cast<long long>(cached_a), cold, static_cast<long long>(cached_b), hit, cold / hit);
  lines.push_back(buf);
  if (!csv.empty()) {
    std::ofstream out(csv);
    out << "# speculative rows: kind,k,accepted,drafted,mean_accepted_length,decode_tok_s,speedup,same_tokens\n"
           "# ttft row: kind,ctx,cold_cached,cold_s,hit_cached,hit_s,speedup\n";
    for (const std::string& l : lines) out << l << "\n";
    if (!out) {
      std::fprintf(stderr, "dsv4 bench: cannot write %s\n", csv.c_str());
      return 2;
    }
  }
  return 0;
}

}  // namespace dsv4::app
