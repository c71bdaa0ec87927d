// Chooses a request's next token from its logits: logit bias and penalties, then greedy
// argmax or temperature / top-k / top-p / min-p sampling with the request's
// own random stream (so a seeded request draws the same tokens whatever
// else is in the batch).
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "sched/sampling_params.h"

namespace dsv4 {

struct SampledToken {
  int32_t token = -1;
  float logprob = 0.0f;                           // of the model's raw distribution
  std::vector<std::pair<int32_t, float>> top;     // top-n (token, logprob), best first
};

// The logprob of `token` under raw logits [vocab], with the top-n
// alternatives (ties to the lower id).
SampledToken score_token(const float* logits, int64_t vocab, int32_t token, int top_n);

// logits: [vocab], the model's raw output for the request's next position;
// context: the request's prompt and output so far (for the penalties).
SampledToken sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                          const std::vector<int32_t>& prompt, const std::vector<int32_t>& output, std::mt19937_64* rng);

// Speculative sampling against a greedily drafted token (the draft
// distribution is a point mass on `draft`): keeps the draft with the target
// probability p(draft), otherwise draws from p with the draft removed, so
// the token has exactly the distribution sample_token draws from. Greedy
// requests get their argmax. accepted: the token is the draft.
SampledToken sample_against_draft(const float* logits, int64_t vocab, const SamplingParams& params,
                                  const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                                  int32_t draft, std::mt19937_64* rng, bool* accepted);

// softmax(logits / T) with T at least 1e-5: the distribution a drafter's
// Gumbel-max draw at temperature T takes its token from (the reference's
// sample(); DSpark drafts this way).
void softmax_at_temperature(const float* logits, int64_t vocab, float temperature, std::vector<float>* q);

// Speculative sampling against a sampled draft (DSpark's drafter draws its
// drafts from q, probabilities [vocab]): keeps the draft with probability
// min(1, p(draft) / q(draft)), otherwise draws from the residual
// normalize(max(0, p - q)) (from p when that has no mass), where p is what
// sample_token draws from; so the token has exactly p's distribution.
// Greedy requests get their argmax. accepted: the token is the draft.
SampledToken sample_against_distribution(const float* logits, int64_t vocab, const SamplingParams& params,
                                         const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                                         int32_t draft, const float* q, std::mt19937_64* rng, bool* accepted);

}  // namespace dsv4
