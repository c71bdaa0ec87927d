// The OpenAI response format over a Generation: the JSON bodies of
// /v1/completions and /v1/chat/completions, and their Server-Sent Events
// (chunks, logprobs, echo, tool calls, the usage chunk, [DONE]). Pure
// functions of the generation's state, so they are tested without a socket.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/generation.h"
#include "server/openai_request.h"

namespace dsv4 {

struct OpenAiContext {
  std::string id;  // cmpl-... or chatcmpl-...
  int64_t created = 0;
  const GenerationPlan* plan = nullptr;
  const Tokenizer* tokenizer = nullptr;
};

// The body once every choice is done.
nlohmann::ordered_json openai_body(const OpenAiContext& ctx, const Generation& gen);

// One streamed response: its events, as "data: ...\n\n" strings.
class OpenAiStream {
 public:
  OpenAiStream(OpenAiContext ctx, const Generation& gen);
  // Chat: each choice's role chunk. Completions with echo and no prompt
  // logprobs: each choice's prompt text.
  std::vector<std::string> begin();
  std::vector<std::string> update(const ChoiceUpdate& u);
  // The usage chunk (when asked) and [DONE].
  std::vector<std::string> end();

 private:
  std::string event(const nlohmann::ordered_json& choice) const;

  OpenAiContext ctx_;
  const Generation& gen_;
  std::vector<int64_t> text_offset_;  // per choice: bytes of text streamed so far
  std::vector<size_t> echoed_;        // per choice: prompt positions echoed so far
};

// A token's text for logprobs (lossy where it splits a UTF-8 character).
std::string token_text(const Tokenizer& tokenizer, int32_t id);

}  // namespace dsv4
