// Structured outputs: the request fields that constrain what the model
// writes, compiled into the grammar the engine masks tokens with (cached
// by their text, so a schema sent again costs nothing).
//
//   response_format      {"type": "json_object"} or {"type": "json_schema",
//                        "json_schema": {"schema": ..., "strict": ...}}
//   structured_outputs   vLLM's {"json": schema} | {"regex": ...} |
//                        {"choice": [...]} | {"grammar": GBNF} | {"json_object": true}
//   guided_json, guided_regex, guided_choice, guided_grammar
//                        vLLM's earlier names for the same
//   tool_choice          "required" or a named function (chat): the reply is
//                        a DSML tool-call block whose arguments are valid
//                        for the called tool's parameter schema
//
// At most one of them per request. In thinking mode the grammar starts
// after the reasoning's </think>.
#pragma once

#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "grammar/grammar_cache.h"
#include "sched/sampling_params.h"
#include "server/openai_request.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

// The model's vocabulary as the grammar engine sees it: every token's
// bytes, text only where the tokenizer says it spells text, EOS and BOS
// never text.
std::shared_ptr<const TokenVocabulary> grammar_vocabulary(const Tokenizer& tokenizer, int64_t model_vocab,
                                                          int32_t bos, int32_t eos);

class StructuredOutputs {
 public:
  // format: how forced tool calls are spelt (the served model's chat format).
  explicit StructuredOutputs(std::shared_ptr<const TokenVocabulary> vocab, ChatFormat format = ChatFormat::kV4)
      : cache_(std::move(vocab)), format_(format) {}

  // Sets params->grammar (and grammar_after in thinking mode) from the
  // body's fields; a 400 naming the field and the construct when they
  // cannot be compiled.
  std::optional<ApiError> apply(const nlohmann::ordered_json& body, const ForcedToolCalls& forced, ChatMode mode,
                                SamplingParams* params);
  GrammarCache& cache() { return cache_; }
  // Whether the body asks for a constraint at all.
  static bool asked(const nlohmann::ordered_json& body, const ForcedToolCalls& forced);

 private:
  GrammarCache cache_;
  ChatFormat format_;
};

// The DSML tool-call block (see chat_encoding) calling one of `tools` (or
// several when parallel), each call's parameters following its schema:
// strings as raw text (string="true"), other values as JSON.
StatusOr<Grammar> tool_call_grammar(const nlohmann::ordered_json& tools, bool parallel,
                                    ChatFormat format = ChatFormat::kV4);

}  // namespace dsv4
