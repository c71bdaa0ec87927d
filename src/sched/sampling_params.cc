#include "sched/sampling_params.h"

#include <climits>
#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "grammar/compiled_grammar.h"

namespace dsv4 {

Status SamplingParams::validate(int64_t vocab_size) const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    return invalid_argument("temperature must be a finite number >= 0, got " + std::to_string(temperature));
  if (top_k < -1) return invalid_argument("top_k must be -1, 0 (off) or positive, got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) return invalid_argument("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return invalid_argument("min_p must be in [0, 1], got " + std::to_string(min_p));
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return invalid_argument("presence_penalty must be in [-2, 2], got " + std::to_string(presence_penalty));
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return invalid_argument("frequency_penalty must be in [-2, 2], got " + std::to_string(frequency_penalty));
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    return invalid_argument("repetition_penalty must be > 0, got " + std::to_string(repetition_penalty));
  if (max_tokens < 0) return invalid_argument("max_tokens must be at least 1 (0 only scores the prompt), got " + std::to_string(max_tokens));
  if (logprobs && (*logprobs < 0 || *logprobs > 20))
    return invalid_argument("logprobs must be in [0, 20], got " + std::to_string(*logprobs));
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > 20))
    return invalid_argument("prompt_logprobs must be in [0, 20], got " + std::to_string(*prompt_logprobs));
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size)
      return invalid_argument("logit_bias: " + std::to_string(id) + " is not a token id (vocabulary " +
                              std::to_string(vocab_size) + ")");
    if (!(bias >= -100.0f && bias <= 100.0f))
      return invalid_argument("logit_bias: the bias of token " + std::to_string(id) + " must be in [-100, 100], got " +
                              std::to_string(bias));
  }
  if (grammar && grammar->vocab().size() != vocab_size)
    return invalid_argument("the grammar was compiled for a vocabulary of " + std::to_string(grammar->vocab().size()) +
                            " tokens, the model has " + std::to_string(vocab_size));
  for (int32_t id : stop_token_ids)
    if (id < 0 || id >= vocab_size)
      return invalid_argument("stop_token_ids: " + std::to_string(id) + " is not a token id (vocabulary " +
                              std::to_string(vocab_size) + ")");
  for (const std::string& s : stop)
    if (s.empty()) return invalid_argument("stop strings must not be empty");
  return Status::Ok();
}

namespace {

template <class T>
Status read_number(const nlohmann::json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number()) return invalid_argument(std::string(key) + " must be a number, got " + it->dump());
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) return invalid_argument(std::string(key) + " must be an integer, got " + it->dump());
  }
  *out = it->get<T>();
  return Status::Ok();
}

}  // namespace

StatusOr<SamplingParams> SamplingParams::from_json(const nlohmann::json& j) {
  if (!j.is_object()) return invalid_argument("request must be a JSON object");
  SamplingParams p;
  DSV4_RETURN_IF_ERROR(read_number(j, "temperature", &p.temperature));
  DSV4_RETURN_IF_ERROR(read_number(j, "top_p", &p.top_p));
  DSV4_RETURN_IF_ERROR(read_number(j, "top_k", &p.top_k));
  DSV4_RETURN_IF_ERROR(read_number(j, "min_p", &p.min_p));
  DSV4_RETURN_IF_ERROR(read_number(j, "presence_penalty", &p.presence_penalty));
  DSV4_RETURN_IF_ERROR(read_number(j, "frequency_penalty", &p.frequency_penalty));
  DSV4_RETURN_IF_ERROR(read_number(j, "repetition_penalty", &p.repetition_penalty));
  // max_completion_tokens (the newer name) wins; each must be valid.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    int64_t v = p.max_tokens;
    DSV4_RETURN_IF_ERROR(read_number(j, key, &v));
    if (v < 0) return invalid_argument(std::string(key) + " must be at least 1 (0 only scores the prompt), got " + std::to_string(v));
    p.max_tokens = v;
  }
  if (auto it = j.find("seed"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) return invalid_argument("seed must be an integer, got " + it->dump());
    p.seed = it->is_number_unsigned() ? it->get<uint64_t>() : static_cast<uint64_t>(it->get<int64_t>());
  }
  if (auto it = j.find("ignore_eos"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return invalid_argument("ignore_eos must be true or false, got " + it->dump());
    p.ignore_eos = it->get<bool>();
  }
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      p.stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& s : *it) {
        if (!s.is_string()) return invalid_argument("stop must be a string or an array of strings, got " + it->dump());
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      return invalid_argument("stop must be a string or an array of strings, got " + it->dump());
    }
  }
  if (auto it = j.find("stop_token_ids"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) return invalid_argument("stop_token_ids must be an array of integers, got " + it->dump());
    for (const auto& v : *it) {
      if (!v.is_number_integer()) return invalid_argument("stop_token_ids must be an array of integers, got " + it->dump());
      p.stop_token_ids.push_back(v.get<int32_t>());
    }
  }
  // Chat completions: logprobs is a boolean and top_logprobs the count;
  // completions: logprobs is the count.
  if (auto it = j.find("logprobs"); it != j.end() && !it->is_null()) {
    if (it->is_boolean()) {
      if (it->get<bool>()) {
        int top = 0;
        DSV4_RETURN_IF_ERROR(read_number(j, "top_logprobs", &top));
        p.logprobs = top;
      }
    } else if (it->is_number_integer()) {
      p.logprobs = it->get<int>();
    } else {
      return invalid_argument("logprobs must be a boolean or an integer, got " + it->dump());
    }
  }
  if (auto it = j.find("prompt_logprobs"); it != j.end() && !it->is_null()) {
    int n = 0;
    DSV4_RETURN_IF_ERROR(read_number(j, "prompt_logprobs", &n));
    p.prompt_logprobs = n;
  }
  if (auto it = j.find("logit_bias"); it != j.end() && !it->is_null()) {
    if (!it->is_object())
      return invalid_argument("logit_bias must be an object mapping token ids to biases, got " + it->dump());
    for (const auto& [key, value] : it->items()) {
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX)
        return invalid_argument("logit_bias: key '" + key + "' is not a token id");
      if (!value.is_number()) return invalid_argument("logit_bias: the bias of token " + key + " must be a number");
      p.logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
    }
  }
  return p;
}

}  // namespace dsv4
