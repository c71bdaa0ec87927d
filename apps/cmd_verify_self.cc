// dsv4 verify --self-check (and dsv4 verify with no model, on the embedded
// default model): a model checked against itself. Whole-prompt prefill is
// the reference; chunked and token-by-token prefill of packed prompts of
// different lengths must reproduce its logits and greedy continuation.
// DeepSeek-V4 or V4.1 (one rank).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "checkpoint/config_json.h"
#include "checkpoint/v41_loader.h"
#include "model/deepseek_v4.h"
#include "model_source.h"

namespace dsv4::app {
namespace {

struct Run {
  std::vector<std::vector<float>> logits;  // per step (prefill, then decode), [B*V]
};

// A model of either family, as the self-check drives it.
struct CheckedModel {
  std::unique_ptr<DeepseekV4> v4;
  std::unique_ptr<DeepseekV41> v41;

  const ServingModel& model() const { return v4 ? static_cast<const ServingModel&>(*v4) : *v41; }
  std::unique_ptr<ContiguousCache> new_cache() const {
    return v4 ? std::make_unique<ContiguousCache>(v4->new_sequence()) : v41->new_cache();
  }
};

// Prefills the prompts (packed, `chunk` tokens per forward; 0 = whole) and
// decodes `steps` greedy tokens. Each chunk carries the tokens before it
// that V4.1's Engram n-grams reach back to.
StatusOr<Run> run(const CheckedModel& m, const std::vector<std::vector<int32_t>>& prompts, int chunk, int steps) {
  const ModelConfig& c = m.model().config();
  const int64_t V = c.vocab_size, back = c.engram.enabled() ? c.engram.max_ngram_size - 1 : 0;
  std::vector<std::unique_ptr<ContiguousCache>> states;
  std::vector<std::vector<int32_t>> seen = prompts;  // each sequence's tokens so far
  for (size_t b = 0; b < prompts.size(); ++b) states.push_back(m.new_cache());
  auto add = [&](ForwardBatch& batch, size_t b, const int32_t* tokens, int64_t n, int64_t prefill_len) {
    const int64_t at = states[b]->length;
    batch.add(states[b].get(), tokens, n, prefill_len);
    batch.chunks.back().history.assign(seen[b].begin() + (at - std::min(at, back)), seen[b].begin() + at);
  };
  Run r;
  std::vector<float> last(prompts.size() * V);
  for (;;) {
    ForwardBatch batch;
    std::vector<size_t> which;
    for (size_t b = 0; b < prompts.size(); ++b) {
      int64_t at = states[b]->length, len = static_cast<int64_t>(prompts[b].size());
      if (at >= len) continue;
      int64_t n = chunk > 0 ? std::min<int64_t>(chunk, len - at) : len - at;
      add(batch, b, prompts[b].data() + at, n, len);
      which.push_back(b);
    }
    if (which.empty()) break;
    ForwardOutput out;
    DSV4_RETURN_IF_ERROR(m.model().forward(batch, &out, false));
    for (size_t i = 0; i < which.size(); ++i)
      if (states[which[i]]->length == static_cast<int64_t>(prompts[which[i]].size()))
        std::copy_n(&out.logits[i * V], V, &last[which[i] * V]);
  }
  r.logits.push_back(last);
  for (int s = 0; s < steps; ++s) {
    ForwardBatch batch;
    std::vector<int32_t> next(prompts.size());
    for (size_t b = 0; b < prompts.size(); ++b) {
      const float* l = &r.logits.back()[b * V];
      next[b] = static_cast<int32_t>(std::max_element(l, l + V) - l);
      add(batch, b, &next[b], 1, 0);
      seen[b].push_back(next[b]);
    }
    ForwardOutput out;
    DSV4_RETURN_IF_ERROR(m.model().forward(batch, &out, false));
    r.logits.push_back(out.logits);
  }
  return r;
}

StatusOr<CheckedModel> load_checked(const std::string& dir, kernels::Numerics numerics) {
  CheckedModel m;
  if (!dir.empty()) {
    DSV4_ASSIGN_OR_RETURN(ModelConfig config, load_any_model_config(dir + "/config.json"));
    if (config.family == ModelFamily::kV41) {
      DSV4_ASSIGN_OR_RETURN(m.v41, load_deepseek_v41(dir, {}, {}, numerics));
      return m;
    }
  }
  DSV4_ASSIGN_OR_RETURN(m.v4, load_model(dir, numerics, /*progress_bar=*/false));
  return m;
}

}  // namespace

int self_check(const std::string& dir, int chunk_option, long prompt_len, kernels::Numerics numerics) {
  auto model = load_checked(dir, numerics);
  if (!model.ok()) {
    std::fprintf(stderr, "dsv4 verify: %s\n", model.status().message().c_str());
    return 2;
  }
  const ModelConfig* config = &model->model().config();
  std::printf("dsv4 verify: %s (%s), numerics %s\n", model_name(dir).c_str(), config->summary().c_str(),
              kernels::numerics_name(numerics));
  // Three prompts of different lengths: the longest past the window and
  // two windows of the largest compress ratio (83 tokens at least), or
  // --prompt-len; one 3/5 of it; one ending just before the window fills, so
  // that greedy decoding crosses it.
  const int steps = 12;
  int max_ratio = 0;
  for (int r : config->compress_ratios) max_ratio = std::max(max_ratio, r);
  const int64_t longest = config->max_position_embeddings - steps - 1;
  const int64_t len0 = std::min<int64_t>(
      longest, prompt_len > 0 ? prompt_len : std::max<int64_t>(83, config->window_size + 2 * max_ratio + 27));
  const int64_t len1 = std::min<int64_t>(longest, std::max<int64_t>(std::min<int64_t>(50, len0), len0 * 3 / 5));
  const int64_t len2 = std::min<int64_t>(longest, std::max<int64_t>(1, config->window_size - steps / 2));
  if (len1 < 1) {
    std::fprintf(stderr, "dsv4 verify: the model's %d positions leave no room for a self-check\n",
                 config->max_position_embeddings);
    return 2;
  }
  std::vector<std::vector<int32_t>> prompts(3);
  for (int64_t i = 0; i < len0; ++i) prompts[0].push_back(static_cast<int32_t>((i * 37 + 11) % config->vocab_size));
  for (int64_t i = 0; i < len1; ++i) prompts[1].push_back(static_cast<int32_t>((i * 101 + 5) % config->vocab_size));
  for (int64_t i = 0; i < len2; ++i) prompts[2].push_back(static_cast<int32_t>((i * 13 + 7) % config->vocab_size));
  std::printf("  prompts of %lld, %lld and %lld tokens, then %d greedy steps\n", static_cast<long long>(len0),
              static_cast<long long>(len1), static_cast<long long>(len2), steps);
  auto ref = run(*model, prompts, 0, steps);
  if (!ref.ok()) {
    std::fprintf(stderr, "dsv4 verify: %s\n", ref.status().message().c_str());
    return 2;
  }
  std::vector<int> chunks = {1, 7, 64};
  if (chunk_option > 0) chunks = {chunk_option};
  bool pass = true;
  for (int chunk : chunks) {
    auto got = run(*model, prompts, chunk, steps);
    if (!got.ok()) {
      std::fprintf(stderr, "dsv4 verify: %s\n", got.status().message().c_str());
      return 2;
    }
    double worst = 0;
    int same = 0, total = 0;
    const int64_t V = config->vocab_size;
    for (size_t s = 0; s < ref->logits.size(); ++s) {
      const auto& a = got->logits[s];
      const auto& g = ref->logits[s];
      for (size_t b = 0; b < prompts.size(); ++b) {
        double num = 0, den = 0;
        for (int64_t v = 0; v < V; ++v) {
          num += std::pow(a[b * V + v] - g[b * V + v], 2);
          den += std::pow(g[b * V + v], 2);
        }
        worst = std::max(worst, std::sqrt(num / den));
        ++total;
        same += std::max_element(&a[b * V], &a[b * V] + V) == &a[b * V] + (std::max_element(&g[b * V], &g[b * V] + V) - &g[b * V]);
      }
    }
    bool ok = worst <= 1e-5 && same == total;
    pass &= ok;
    std::printf("  prefill in chunks of %-3d  worst logits rel L2 %.3e (bound 1e-05)  greedy %d/%d  %s\n", chunk, worst,
                same, total, ok ? "ok" : "FAIL");
  }
  std::printf("%s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}

}  // namespace dsv4::app
