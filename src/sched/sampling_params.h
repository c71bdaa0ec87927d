// How a request wants its tokens chosen and when it stops, with the
// defaults and ranges of the OpenAI API / vLLM.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace dsv4 {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0 or -1: off
  float top_p = 1.0f;        // (0, 1]
  float min_p = 0.0f;        // [0, 1]
  std::optional<uint64_t> seed;
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0; 1: off
  int64_t max_tokens = 16;          // >= 1
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;  // stop strings, matched on the detokenized output
  // Logprob of each sampled token plus the top-n alternatives, n in [0, 20];
  // none when unset.
  std::optional<int> logprobs;

  bool greedy() const { return temperature == 0.0f; }
  // The plain argmax of the raw logits decides the token: greedy, no
  // penalties, no logprobs (so ranks holding vocabulary slices need to
  // exchange only their best).
  bool argmax_only() const {
    return greedy() && presence_penalty == 0.0f && frequency_penalty == 0.0f && repetition_penalty == 1.0f &&
           !logprobs;
  }
  // Checks every range; token ids against the vocabulary.
  Status validate(int64_t vocab_size) const;
  // Reads the OpenAI/vLLM request fields present in `j` over the defaults
  // (temperature, top_p, top_k, min_p, seed, presence_penalty,
  // frequency_penalty, repetition_penalty, max_tokens or
  // max_completion_tokens, ignore_eos, stop, stop_token_ids, logprobs with
  // top_logprobs). A field of the wrong type is an error naming it.
  static StatusOr<SamplingParams> from_json(const nlohmann::json& j);
};

}  // namespace dsv4
