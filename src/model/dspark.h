// The DSpark drafter of DeepSeek-V4-Flash-DSpark, as the release's
// inference/model.py computes it (forward_spec):
//
//   taps      the target's layers dspark_target_layer_ids, each block's
//             output streams averaged over the hc copies, concatenated
//   main_x    = main_norm(main_proj(taps)), one row per target position
//   rings     per stage, window_size slots: slot p % window holds
//             kv_norm(wkv(main_x_p)) with plain RoPE at p and the FP8 QAT
//             rounding; filled at prefill and one row per committed position.
//             Here they are the window rows of the stage's cache layer
//             (ModelConfig::dspark_cache_layer) in the sequence's cache, so
//             they page, count and hit the prefix cache like the window KV.
//   block     [anchor, noise x (K-1)] at positions p+1..p+K through the
//             stages (full V4 blocks whose attention reads the ring's filled
//             slots and, non-causally, the whole block)
//   head      the last stage's hc_head and norm, the trunk's head; then left
//             to right a Markov bias markov_w2 . markov_w1[previous token]
//             and a draw; a raw confidence logit per row from
//             [hidden ; markov_w1[previous]]
//
// The model owns no state: the rings live in the sequences' caches.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "model/sequence_cache.h"

namespace dsv4 {

// Tap `tap` of `rows` rows: the mean over the hc copies of a block's output
// streams [rows, hc, dim], into taps [rows, num_taps, dim].
void dspark_tap_rows(const float* streams, int64_t rows, int hc, int64_t dim, int tap, int num_taps, float* taps);

// The reference's sample(): argmax at temperature 0 (the first maximum),
// else argmax(softmax(logits / T) / E) with E ~ Exp(1) (Gumbel-max), the
// variates from `noise` [vocab] when given, else from rng.
int32_t dspark_draw(const float* logits, int64_t vocab, float temperature, const float* noise, std::mt19937_64* rng);

// One draft call: the tap row of position p (the last committed position)
// goes into the rings, then the block at p+1..p+K drafts K tokens.
struct DSparkCall {
  SequenceCache* cache = nullptr;  // holds the rings
  int64_t position = 0;        // p (> 0: a call at 0 would only fill the rings, as the reference's prefill)
  int32_t anchor = 0;          // the token at p+1
  const float* tap = nullptr;  // [taps * dim]: the taps of position p
  // temperature 0: each draft the argmax; else the Gumbel-max draw
  // argmax(softmax(logits / T) / E), E ~ Exp(1): from `noise` [K, vocab]
  // when given (the golden's recorded variates), else from rng.
  float temperature = 0.0f;
  const float* noise = nullptr;
  std::mt19937_64* rng = nullptr;
  // When set, [K]: the previous token of each Markov step (verification
  // feeds the reference's chain; prev[0] is the anchor), not the draws.
  const int32_t* forced_prev = nullptr;
  // Where its block rows sit in the reference's tensors ([batch, K]):
  // row reference_index of reference_batch (elementwise rounding order).
  int64_t reference_index = 0, reference_batch = 1;
};

struct DSparkDraft {
  std::vector<int32_t> ids;          // [K + 1]: the anchor, then the K drafts
  std::vector<float> logits;         // [K, vocab]: base + Markov bias (not temperature-scaled)
  std::vector<float> confidence;     // [K]: raw logits (no sigmoid)
  // When the call asks for them (verification):
  std::vector<float> main_x;         // [dim]
  std::vector<float> hidden;         // [K, dim]: hc_head output, before the norm
  std::vector<float> base_logits;    // [K, vocab]
  std::vector<std::vector<float>> stage_out;  // [stages][K, hc, dim]
};

}  // namespace dsv4
