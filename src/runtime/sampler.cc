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

SampledToken sample_token(const float* logits, int64_t vocab, const SamplingParams& p,
                          const std::vector<int32_t>& prompt, const std::vector<int32_t>& output, std::mt19937_64* rng) {
  std::vector<float> l(logits, logits + vocab);
  apply_penalties(l, p, prompt, output);
  SampledToken out;
  if (p.greedy()) {
    out.token = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  } else {
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
    double total = 0.0;
    for (int64_t i = 0; i < keep; ++i) total += prob[i];
    // 53 random bits -> [0, 1)
    const double u = static_cast<double>((*rng)() >> 11) * (1.0 / 9007199254740992.0) * total;
    double cum = 0.0;
    out.token = idx[keep - 1];
    for (int64_t i = 0; i < keep; ++i) {
      cum += prob[i];
      if (u < cum) {
        out.token = idx[i];
        break;
      }
    }
  }
  if (p.logprobs) {
    const std::vector<float> lp = log_softmax(logits, vocab);
    out.logprob = lp[out.token];
    std::vector<int32_t> idx(vocab);
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t n = std::min<int64_t>(*p.logprobs, vocab);
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(),
                      [&](int32_t a, int32_t b) { return lp[a] > lp[b] || (lp[a] == lp[b] && a < b); });
    for (int64_t i = 0; i < n; ++i) out.top.emplace_back(idx[i], lp[idx[i]]);
  }
  return out;
}

}  // namespace dsv4
