// How a request wants its tokens chosen and when it stops, with the
// defaults and ranges of the OpenAI API / vLLM.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace dsv4 {

class CompiledGrammar;

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0 or -1: off
  float top_p = 1.0f;        // (0, 1]
  float min_p = 0.0f;        // [0, 1]
  std::optional<uint64_t> seed;
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0; 1: off
  int64_t max_tokens = 16;          // >= 0; 0 only scores the prompt (see prompt_logprobs)
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;  // stop strings, matched on the detokenized output
  // Logprob of each sampled token plus the top-n alternatives, n in [0, 20];
  // none when unset.
  std::optional<int> logprobs;
  // Logprob of each prompt token (but the first) under the model, plus the
  // top-n alternatives, n in [0, 20] (vLLM's prompt_logprobs; completions'
  // echo with logprobs). Such a request computes every prompt row: no prefix
  // cache hit.
  std::optional<int> prompt_logprobs;
  // Added to the logits of these token ids before choosing (OpenAI's
  // logit_bias, each in [-100, 100]); logprobs stay the model's own.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Constrained decoding: every token chosen keeps the output a prefix of
  // the grammar's language, and EOS comes only where the text may end (a
  // request whose grammar is complete stops there). grammar_after: the
  // grammar starts once the output ends with this text (thinking mode's
  // </think>); empty: from the first token.
  std::shared_ptr<const CompiledGrammar> grammar;
  std::string grammar_after;

  bool greedy() const { return temperature == 0.0f; }
  // The plain argmax of the raw logits decides the token: greedy, no
  // penalties, no logprobs (so ranks holding vocabulary slices need to
  // exchange only their best).
  bool argmax_only() const {
    return greedy() && presence_penalty == 0.0f && frequency_penalty == 0.0f && repetition_penalty == 1.0f &&
           !logprobs && logit_bias.empty() && !grammar;
  }
  // Checks every range; token ids against the vocabulary (and the
  // grammar's against it too).
  Status validate(int64_t vocab_size) const;
  // Reads the OpenAI/vLLM request fields present in `j` over the defaults
  // (temperature, top_p, top_k, min_p, seed, presence_penalty,
  // frequency_penalty, repetition_penalty, max_tokens or
  // max_completion_tokens, ignore_eos, stop, stop_token_ids, logprobs with
  // top_logprobs, prompt_logprobs, logit_bias). A field of the wrong type is
  // an error whose message starts with the field's name.
  static StatusOr<SamplingParams> from_json(const nlohmann::json& j);
};

}  // namespace dsv4
