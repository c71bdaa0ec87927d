// dsv4 bench --structured: what constrained decoding costs. For each case
// of the structured-output test set (JSON schemas, json_object, regexes,
// choices, GBNF grammars, forced tool calls), compiled through the same
// path a request takes: the compile time, then the time of each token's
// mask (TokenConstraint::mask: the grammar's mask and the -inf writes) over
// random walks through the grammar on the model's vocabulary; then a
// decode batch of constrained requests on the model against the same
// batch unconstrained: the grammar's share of a decode step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/phase_timer.h"
#include "model/deepseek_v4.h"
#include "runtime/engine.h"
#include "runtime/token_constraint.h"
#include "server/structured_output.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_tokenizer.h"

namespace dsv4::app {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::ordered_json;

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Case {
  std::string name;
  ordered_json body = ordered_json::object();
  ForcedToolCalls forced;
};

std::vector<Case> read_cases(const ordered_json& c) {
  std::vector<Case> out;
  for (const auto& [name, schema] : c.at("schemas").items())
    out.push_back({"schema " + name,
                   {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", name}, {"schema", schema}}}}}},
                   {}});
  out.push_back({"json_object", {{"response_format", {{"type", "json_object"}}}}, {}});
  for (const auto& r : c.at("regexes")) out.push_back({"regex " + r.get<std::string>(), {{"guided_regex", r}}, {}});
  for (const auto& ch : c.at("choices")) out.push_back({"choice " + ch.dump(), {{"guided_choice", ch}}, {}});
  int g = 0;
  for (const auto& gr : c.at("grammars")) out.push_back({"gbnf #" + std::to_string(g++), {{"guided_grammar", gr.at("gbnf")}}, {}});
  for (const auto& tools : c.at("tools")) {
    Case t;
    t.name = "tools";
    for (const auto& tool : tools) t.name += " " + tool["function"]["name"].get<std::string>();
    t.forced.tools = tools;
    out.push_back(std::move(t));
  }
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

// Decode steps of `batch` requests, gen tokens each, sampled; grammars[i]
// (null: none) constrains request i. Returns seconds per decode step and
// the grammar phase's seconds per step.
StatusOr<std::pair<double, double>> decode_batch(const DeepseekV4& m, int64_t batch, int64_t gen,
                                                 const std::vector<std::shared_ptr<const CompiledGrammar>>& grammars) {
  EngineOptions o;
  o.scheduler.max_num_seqs = batch;
  o.cache.memory_bytes = int64_t{1} << 30;
  o.cache.enable_prefix_caching = false;
  DSV4_ASSIGN_OR_RETURN(auto engine, Engine::create(&m, o));
  std::mt19937 rng(3);
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<int32_t> prompt(64);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % m.config().vocab_size);
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = static_cast<uint64_t>(i);
    p.max_tokens = gen;
    p.ignore_eos = true;
    p.grammar = grammars[i % grammars.size()];
    DSV4_RETURN_IF_ERROR(engine->add_request(prompt, p).status());
  }
  engine->step();  // the prompts
  PhaseTimer::reset();
  int64_t steps = 0;
  const auto t0 = Clock::now();
  // Only full-batch steps count (constrained requests may end early).
  while (engine->has_unfinished() && engine->scheduler().num_running(0) == batch) {
    engine->step();
    ++steps;
  }
  const double wall = seconds(t0);
  const double grammar = PhaseTimer::totals()[static_cast<int>(Phase::kGrammar)];
  while (engine->has_unfinished()) engine->step();
  if (steps == 0) return invalid_argument("no full decode step ran");
  return std::make_pair(wall / steps, grammar / steps);
}

}  // namespace

int bench_structured(const DeepseekV4& m, const std::string& name, const std::string& model_dir,
                     const std::string& tokenizer_dir, const std::string& cases_path, int64_t batch, int64_t gen) {
  std::ifstream in(cases_path);
  if (!in) {
    std::fprintf(stderr, "dsv4 bench: cannot read the cases file %s (--cases)\n", cases_path.c_str());
    return 2;
  }
  std::vector<Case> cases;
  try {
    cases = read_cases(ordered_json::parse(in));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsv4 bench: %s: %s\n", cases_path.c_str(), e.what());
    return 2;
  }
  const ModelConfig& c = m.config();
  std::unique_ptr<Tokenizer> tokenizer;
  std::string tokenizer_name = "byte-level";
  const std::string tok_dir = !tokenizer_dir.empty() ? tokenizer_dir : model_dir;
  if (!tok_dir.empty() && std::filesystem::exists(tok_dir + "/tokenizer.json")) {
    auto bpe = BpeTokenizer::load(tok_dir);
    if (!bpe.ok()) {
      std::fprintf(stderr, "dsv4 bench: %s\n", bpe.status().message().c_str());
      return 2;
    }
    tokenizer = std::move(*bpe);
    tokenizer_name = tok_dir + "/tokenizer.json";
  } else {
    tokenizer = std::make_unique<ByteTokenizer>(c.vocab_size);
  }
  const auto v0 = Clock::now();
  auto vocab = grammar_vocabulary(*tokenizer, c.vocab_size, c.bos_token_id, c.eos_token_id);
  std::printf("dsv4 bench --structured: %s (%s)\n", name.c_str(), c.summary().c_str());
  std::printf("tokenizer %s: %lld tokens, byte trie of %zu nodes built in %.1f ms\n\n", tokenizer_name.c_str(),
              static_cast<long long>(vocab->size()), vocab->trie().size(), seconds(v0) * 1e3);

  // Two passes of random walks per case, as a sampling request at
  // temperature 1 over random logits would take them, 256 tokens at most
  // each: the first meets most states first (their token classes are
  // computed then, and kept with the grammar), the second runs on them.
  std::printf("%-32s %8s %7s %28s %28s\n", "", "", "", "first walks (classes built)", "next walks (classes kept)");
  std::printf("%-32s %8s %7s %9s %9s %9s %9s %9s %9s\n", "case", "compile", "masks", "median", "p99", "max",
              "median", "p99", "max");
  std::printf("%-32s %8s %7s %9s %9s %9s %9s %9s %9s\n", "", "ms", "", "us", "us", "us", "us", "us", "us");
  std::vector<double> all_cold, all_warm;
  std::vector<std::shared_ptr<const CompiledGrammar>> compiled;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> logits(c.vocab_size);
  auto walks = [&](const std::shared_ptr<const CompiledGrammar>& g, std::vector<double>* times) {
    for (int walk = 0; walk < 4; ++walk) {
      TokenConstraint constraint(g, "");
      for (int64_t used = 0; used < 256 && !constraint.finished(); ++used) {
        for (float& x : logits) x = uniform(rng);
        const auto m0 = Clock::now();
        const bool any = constraint.mask(logits.data(), 256 - used);
        times->push_back(seconds(m0) * 1e6);
        if (!any) break;
        const int32_t token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        constraint.take(token);
        if (token == c.eos_token_id) break;
      }
    }
  };
  for (const Case& k : cases) {
    // A fresh compiler each time: the compile is timed, not a cache hit.
    StructuredOutputs structured(vocab);
    SamplingParams params;
    const auto t0 = Clock::now();
    if (auto e = structured.apply(k.body, k.forced, ChatMode::kChat, &params)) {
      std::fprintf(stderr, "dsv4 bench: case %s: %s\n", k.name.c_str(), e->message.c_str());
      return 2;
    }
    const double compile_ms = seconds(t0) * 1e3;
    compiled.push_back(params.grammar);
    std::vector<double> cold, warm;
    walks(params.grammar, &cold);
    walks(params.grammar, &warm);
    all_cold.insert(all_cold.end(), cold.begin(), cold.end());
    all_warm.insert(all_warm.end(), warm.begin(), warm.end());
    std::printf("%-32.32s %8.2f %7zu %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n", k.name.c_str(), compile_ms,
                cold.size() + warm.size(), percentile(cold, 0.5), percentile(cold, 0.99), percentile(cold, 1.0),
                percentile(warm, 0.5), percentile(warm, 0.99), percentile(warm, 1.0));
  }
  std::printf("%-32s %8s %7zu %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n", "all masks", "", all_cold.size() + all_warm.size(),
              percentile(all_cold, 0.5), percentile(all_cold, 0.99), percentile(all_cold, 1.0), percentile(all_warm, 0.5),
              percentile(all_warm, 0.99), percentile(all_warm, 1.0));
  std::vector<double> all = all_cold;
  all.insert(all.end(), all_warm.begin(), all_warm.end());
  std::printf("both passes: median %.1f us, p90 %.1f us, p99 %.1f us\n\n", percentile(all, 0.5), percentile(all, 0.9),
              percentile(all, 0.99));

  // The grammar's share of a decode step, the engine's own accounting.
  if (gen == 0) return 0;  // --gen 0: the masks only
  // A first unconstrained batch warms the step's memory; the constrained
  // one runs between two unconstrained ones (their mean is the baseline).
  PhaseTimer::enable(true);
  auto warmup = decode_batch(m, batch, std::min<int64_t>(gen, 4), {nullptr});
  auto before = decode_batch(m, batch, gen, {nullptr});
  auto constrained = decode_batch(m, batch, gen, compiled);
  auto after = decode_batch(m, batch, gen, {nullptr});
  PhaseTimer::enable(false);
  StatusOr<std::pair<double, double>> plain = before;
  if (!warmup.ok()) plain = warmup.status();
  else if (!after.ok()) plain = after.status();
  else if (plain.ok()) plain->first = (before->first + after->first) / 2;
  if (!plain.ok() || !constrained.ok()) {
    std::fprintf(stderr, "dsv4 bench: %s\n", (plain.ok() ? constrained : plain).status().message().c_str());
    return 2;
  }
  const double share = constrained->second / constrained->first;
  std::printf("batch-%lld decode step, sampled, %lld tokens: unconstrained %.2f ms, constrained %.2f ms (%.3fx)\n",
              static_cast<long long>(batch), static_cast<long long>(gen), plain->first * 1e3, constrained->first * 1e3,
              constrained->first / plain->first);
  std::printf("grammar masks %.3f ms per step (%.1f us per request) = %.2f%% of the constrained step (target <= 5%%: %s)\n",
              constrained->second * 1e3, constrained->second * 1e6 / batch, share * 100, share <= 0.05 ? "met" : "MISSED");
  return 0;
}

}  // namespace dsv4::app
