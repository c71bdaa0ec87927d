// The DeepSeek-V4.1 forward, as its reference computes it: embedding, hc
// copies, per layer an optional Engram lookup then a block whose attention
// collapses the copies with the mix the previous sublayer computed (the
// first with copy 0), the MoE with the attention's; the head collapses with
// the last FFN's mix. The model owns no sequence state: the caches hold it
// (V41Chunk).
#pragma once

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"
#include "model/dspark.h"
#include "model/engram_hash.h"
#include "model/reference_rows.h"
#include "model/rope.h"
#include "model/v41_attention.h"
#include "model/contiguous_cache.h"
#include "model/v41_weights.h"

namespace dsv4 {

struct V41Input {
  SequenceCache* cache = nullptr;  // the sequence's (new_cache(), or its pages)
  std::vector<int32_t> tokens;     // at positions cache->length ..
  int64_t prefill_len = 0;         // the prompt's length (see V41Chunk)
  // The tokens before cache->length that Engram's n-grams reach back to:
  // the last min(length, max_ngram_size - 1) of them.
  std::vector<int32_t> history;
  int64_t cached_until = 0;           // see V41Chunk
  bool keep_all_window_rows = false;  // see V41Chunk
};

struct V41Output {
  std::vector<float> logits;  // [inputs, vocab]: at each input's last token
  std::vector<float> taps;    // [rows, taps * dim]: the DSpark taps (main_hidden), when asked
  // When asked: layer_out.N [rows, hc, dim], the streams after block N.
  std::vector<std::pair<std::string, std::vector<float>>> trace;
};

// One DSpark draft (the reference's forward_spec after a decode step): the
// taps of position p enter the rings, then the block [anchor, noise x (K-1)]
// at positions p+1..p+K runs through the stages and the head drafts K tokens.
struct V41DraftCall {
  SequenceCache* cache = nullptr;  // holds the rings (the stages' window rows)
  int64_t position = 0;        // p >= 1, the last committed position
  int32_t anchor = 0;          // the token at p + 1
  const float* tap = nullptr;  // [taps * dim]: the taps of position p
  // temperature 0: argmax; else the Gumbel-max draw (dspark_draw), its
  // variates from `noise` [K, vocab] when given, else from rng.
  float temperature = 0.0f;
  const float* noise = nullptr;
  std::mt19937_64* rng = nullptr;
  // When set, [K]: the previous token of each Markov step (prev[0] is the
  // anchor) instead of the draws (verification against a recorded chain).
  const int32_t* forced_prev = nullptr;
};

class DeepseekV41 {
 public:
  // token_map: each token id's Engram compressed id (tokenizer/engram_token_map.h).
  DeepseekV41(ModelConfig config, std::unique_ptr<V41Weights> weights, std::vector<int32_t> token_map,
              int32_t compressed_vocab);

  const ModelConfig& config() const { return config_; }
  // A sequence's caches in plain vectors (tests, verify).
  std::unique_ptr<ContiguousCache> new_cache() const;
  // Engram look-back: how many tokens before a chunk V41Input::history holds.
  int history_tokens() const { return config_.engram.enabled() ? config_.engram.max_ngram_size - 1 : 0; }

  Status forward(const std::vector<V41Input>& inputs, V41Output* out, bool want_taps = false, bool trace = false) const;

  // The DSpark drafter (config().has_dspark(); model/v41_dspark.cc). Fill
  // puts the taps [rows, taps * dim] of positions pos0.. into the rings (a
  // prefill's forward_spec does only this); draft places each call's rows as
  // the reference's batch of these calls would.
  Status dspark_fill(SequenceCache* cache, const float* taps, int64_t rows, int64_t pos0) const;
  Status dspark_draft(const std::vector<V41DraftCall>& calls, std::vector<DSparkDraft>* out) const;

 private:
  using Attend = std::function<void(const float* x, float* y)>;
  void engram(const V41Engram& g, int which, const std::vector<int64_t>& rows_ids, float* h, int64_t rows,
              const ReferenceRows& rr) const;
  void moe(const V41MoE& w, int top_k, const float* x, int64_t rows, const ReferenceRows& rr, float* y) const;
  // A block over h [rows, hc, dim], its attention `attend`; pre [rows, hc]:
  // the collapse weights the previous sublayer left, replaced by the FFN's.
  void block(const V41Block& b, const Attend& attend, int top_k, const ReferenceRows& rr, std::vector<float>* pre,
             float* h) const;
  const Rope& rope_for(int ratio) const { return ratio ? compress_rope_ : window_rope_; }

  ModelConfig config_;
  std::unique_ptr<V41Weights> weights_;
  std::vector<int32_t> token_map_;
  EngramHashLayout engram_layout_;
  Rope window_rope_, compress_rope_;
};

}  // namespace dsv4
