// The Anthropic Messages API (POST /v1/messages) as a second format over the
// same generation: the request (system, messages with text / tool_use /
// tool_result / thinking blocks, tools, tool_choice, thinking,
// stop_sequences) becomes the chat prompt the OpenAI path renders, and the
// response is Anthropic's message object or its event stream
// (message_start, content_block_*, message_delta, message_stop).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/generation.h"
#include "server/openai_request.h"

namespace dsv4 {

// A Messages request as a generation plan (chat, one prompt, n = 1).
PlanOrError plan_messages(const nlohmann::ordered_json& body, const ServedModel& model);

// {"type": "error", "error": {"type": ..., "message": ...}}, the type from
// the status (invalid_request_error, authentication_error, not_found_error,
// overloaded_error, ...).
std::string anthropic_error_json(const ApiError& error);

// The message once the generation is done.
nlohmann::ordered_json anthropic_body(const std::string& id, const GenerationPlan& plan, const Generation& gen);

// One streamed message: its events as "event: ...\ndata: ...\n\n" strings.
class AnthropicStream {
 public:
  AnthropicStream(std::string id, const GenerationPlan& plan, const Generation& gen);
  std::vector<std::string> begin();  // message_start
  std::vector<std::string> update(const ChoiceUpdate& u);
  // Closes the open block, sends the tool_use blocks, message_delta and
  // message_stop.
  std::vector<std::string> end();

 private:
  enum class Block { kNone, kThinking, kText };
  void open(Block b, std::vector<std::string>* out);
  void close(std::vector<std::string>* out);

  std::string id_;
  const GenerationPlan& plan_;
  const Generation& gen_;
  Block block_ = Block::kNone;
  int index_ = -1;  // of the open (or last) content block
};

}  // namespace dsv4
