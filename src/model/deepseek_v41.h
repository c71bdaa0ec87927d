// The DeepSeek-V4.1 forward, as its reference computes it: embedding, hc
// copies, per layer an optional Engram lookup then a block whose attention
// collapses the copies with the mix the previous sublayer computed (the
// first with copy 0), the MoE with the attention's; the head collapses with
// the last FFN's mix. The model owns no sequence state (V41Sequence).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"
#include "model/engram_hash.h"
#include "model/reference_rows.h"
#include "model/rope.h"
#include "model/v41_attention.h"
#include "model/v41_sequence.h"
#include "model/v41_weights.h"

namespace dsv4 {

struct V41Input {
  V41Sequence* seq = nullptr;
  std::vector<int32_t> tokens;  // at positions seq->length ..
  int64_t prefill_len = 0;      // the prompt's length (see V41Chunk)
};

struct V41Output {
  std::vector<float> logits;  // [inputs, vocab]: at each input's last token
  std::vector<float> taps;    // [rows, taps * dim]: the DSpark taps (main_hidden), when asked
  // When asked: layer_out.N [rows, hc, dim], the streams after block N.
  std::vector<std::pair<std::string, std::vector<float>>> trace;
};

class DeepseekV41 {
 public:
  // token_map: each token id's Engram compressed id (tokenizer/engram_token_map.h).
  DeepseekV41(ModelConfig config, std::unique_ptr<V41Weights> weights, std::vector<int32_t> token_map,
              int32_t compressed_vocab);

  const ModelConfig& config() const { return config_; }
  V41Sequence new_sequence() const { return V41Sequence(config_); }

  Status forward(const std::vector<V41Input>& inputs, V41Output* out, bool want_taps = false, bool trace = false) const;

 private:
  void engram(const V41Engram& g, int which, const std::vector<int64_t>& rows_ids, float* h, int64_t rows,
              const ReferenceRows& rr) const;
  void moe(const V41MoE& w, const float* x, int64_t rows, const ReferenceRows& rr, float* y) const;
  void block(int layer, const std::vector<V41Chunk>& chunks, const ReferenceRows& rr, V41Shared* shared,
             std::vector<float>* pre, float* h) const;
  const Rope& rope_for(int ratio) const { return ratio ? compress_rope_ : window_rope_; }

  ModelConfig config_;
  std::unique_ptr<V41Weights> weights_;
  std::vector<int32_t> token_map_;
  EngramHashLayout engram_layout_;
  Rope window_rope_, compress_rope_;
};

}  // namespace dsv4
