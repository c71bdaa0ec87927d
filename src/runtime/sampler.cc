#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

namespace dsv4 {
namespace {

// log softmax of the raw logits, in double for the normalizer.
std::vector<float> log_softmax(const float* logits, int64_t n) {
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const float log_z = mx + static_cast<float>(std::log(sum));
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = logits[i] - log_z;
  return out;
}

void apply_penalties(std::vector<float>& l, const SamplingParams& p, const std::vector<int32_t>& prompt,
                     const std::vector<int32_t>& output) {
  for (const auto& [token, bias] : p.logit_bias) l[token] += bias;
  if (p.repetition_penalty != 1.0f) {
    std::vector<uint8_t> seen(l.size(), 0);
    for (int32_t t : prompt) seen[t] = 1;
    for (int32_t t : output) seen[t] = 1;
    for (size_t i = 0; i < l.size(); ++i)
      if (seen[i]) l[i] = l[i] > 0 ? l[i] / p.repetition_penalty : l[i] * p.repetition_penalty;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> count;
    for (int32_t t : output) ++count[t];
    for (const auto& [t, c] : count) l[t] -= p.frequency_penalty * c + p.presence_penalty;
  }
}

}  // namespace

namespace {

// The distribution sample_token draws from when not greedy: candidates by
// decreasing processed logit with their unnormalized probabilities, after
// temperature, top-k, top-p and min-p.
struct Candidates {
  std::vector<int32_t> token;
  std::vector<double> weight;
  double total = 0.0;
};

Candidates candidates(std::vector<float> l, const SamplingParams& p) {
  const int64_t vocab = static_cast<int64_t>(l.size());
  for (float& v : l) v /= p.temperature;
  // Candidates by decreasing logit; top-k, then top-p over the
  // renormalized probabilities, then min-p against the best.
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  int64_t keep = vocab;
  if (p.top_k > 0) keep = std::min<int64_t>(keep, p.top_k);
  std::vector<double> prob(keep);
  double z = 0.0;
  for (int64_t i = 0; i < keep; ++i) z += prob[i] = std::exp(static_cast<double>(l[idx[i]] - l[idx[0]]));
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    int64_t n = 0;
    while (n < keep && (n == 0 || cum < p.top_p * z)) cum += prob[n++];
    keep = n;
  }
  if (p.min_p > 0.0f) {
    int64_t n = 1;
    while (n < keep && prob[n] >= p.min_p * prob[0]) ++n;
    keep = n;
  }
  Candidates c;
  c.token.assign(idx.begin(), idx.begin() + keep);
  c.weight.assign(prob.begin(), prob.begin() + keep);
  for (double w : c.weight) c.total += w;
  return c;
}

// 53 random bits -> [0, 1)
double uniform(std::mt19937_64* rng) { return static_cast<double>((*rng)() >> 11) * (1.0 / 9007199254740992.0); }

int32_t draw(const Candidates& c, std::mt19937_64* rng) {
  const double u = uniform(rng) * c.total;
  double cum = 0.0;
  for (size_t i = 0; i < c.token.size(); ++i) {
    cum += c.weight[i];
    if (u < cum) return c.token[i];
  }
  // Rounding left u at the very top: the last candidate with any weight.
  for (size_t i = c.token.size(); i-- > 0;)
    if (c.weight[i] > 0.0) return c.token[i];
  return c.token.back();
}

void add_logprobs(const float* logits, int64_t vocab, const SamplingParams& p, SampledToken* out) {
  if (!p.logprobs) return;
  SampledToken scored = score_token(logits, vocab, out->token, *p.logprobs);
  out->logprob = scored.logprob;
  out->top = std::move(scored.top);
}

}  // namespace

SampledToken score_token(const float* logits, int64_t vocab, int32_t token, int top_n) {
  const std::vector<float> lp = log_softmax(logits, vocab);
  SampledToken out;
  out.token = token;
  out.logprob = lp[token];
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t n = std::min<int64_t>(top_n, vocab);
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(),
                    [&](int32_t a, int32_t b) { return lp[a] > lp[b] || (lp[a] == lp[b] && a < b); });
  for (int64_t i = 0; i < n; ++i) out.top.emplace_back(idx[i], lp[idx[i]]);
  return out;
}

SampledToken sample_token(const float* logits, int64_t vocab, const SamplingParams& p,
                          const std::vector<int32_t>& prompt, const std::vector<int32_t>& output, std::mt19937_64* rng) {
  std::vector<float> l(logits, logits + vocab);
  apply_penalties(l, p, prompt, output);
  SampledToken out;
  if (p.greedy()) out.token = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  else out.token = draw(candidates(std::move(l), p), rng);
  add_logprobs(logits, vocab, p, &out);
  return out;
}

SampledToken sample_against_draft(const float* logits, int64_t vocab, const SamplingParams& p,
                                  const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                                  int32_t draft, std::mt19937_64* rng, bool* accepted) {
  std::vector<float> l(logits, logits + vocab);
  apply_penalties(l, p, prompt, output);
  SampledToken out;
  if (p.greedy()) {
    out.token = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  } else {
    Candidates c = candidates(std::move(l), p);
    auto it = std::find(c.token.begin(), c.token.end(), draft);
    const double kept = it == c.token.end() ? 0.0 : c.weight[it - c.token.begin()];
    if (uniform(rng) * c.total < kept) {
      out.token = draft;
    } else {  // the residual max(0, p - point mass) is p without the draft
      if (it != c.token.end()) {
        c.total -= kept;
        c.weight[it - c.token.begin()] = 0.0;
      }
      out.token = draw(c, rng);
    }
  }
  *accepted = out.token == draft;
  add_logprobs(logits, vocab, p, &out);
  return out;
}

SampledToken sample_against_distribution(const float* logits, int64_t vocab, const SamplingParams& p,
                                         const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                                         int32_t draft, const float* q, std::mt19937_64* rng, bool* accepted) {
  std::vector<float> l(logits, logits + vocab);
  apply_penalties(l, p, prompt, output);
  SampledToken out;
  if (p.greedy()) {
    out.token = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  } else {
    Candidates c = candidates(std::move(l), p);
    auto it = std::find(c.token.begin(), c.token.end(), draft);
    const double p_draft = it == c.token.end() ? 0.0 : c.weight[it - c.token.begin()] / c.total;
    const double q_draft = std::max(static_cast<double>(q[draft]), 1e-8);
    if (uniform(rng) < std::min(1.0, p_draft / q_draft)) {
      out.token = draft;
    } else {  // the residual max(0, p - q) over p's candidates
      Candidates r = c;
      r.total = 0.0;
      for (size_t i = 0; i < r.token.size(); ++i) {
        r.weight[i] = std::max(0.0, c.weight[i] / c.total - static_cast<double>(q[r.token[i]]));
        r.total += r.weight[i];
      }
      out.token = r.total > 1e-8 ? draw(r, rng) : draw(c, rng);
    }
  }
  *accepted = out.token == draft;
  add_logprobs(logits, vocab, p, &out);
  return out;
}

void softmax_at_temperature(const float* logits, int64_t vocab, float temperature, std::vector<float>* q) {
  const float t = std::max(temperature, 1e-5f);
  q->resize(vocab);
  float mx = -INFINITY;
  for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, (*q)[v] = logits[v] / t);
  double sum = 0.0;
  for (int64_t v = 0; v < vocab; ++v) sum += (*q)[v] = std::exp((*q)[v] - mx);
  for (float& x : *q) x = static_cast<float>(x / sum);
}

}  // namespace dsv4
