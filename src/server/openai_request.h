// OpenAI request bodies (completions and chat completions) read into what
// the server runs: prompts as token ids, sampling parameters, choices,
// streaming and output options. Every problem is an ApiError with the
// HTTP status and message OpenAI clients expect.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sched/sampling_params.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;  // OpenAI's code where one exists (model_not_found, context_length_exceeded, ...)
  std::string to_json() const;
};

ApiError api_error(int status, std::string message, std::string param = "", std::string code = "",
                   std::string type = "invalid_request_error");

struct GenerationPlan {
  bool chat = false;
  std::vector<std::vector<int32_t>> prompts;  // completions: one per prompt; chat: one
  SamplingParams params;
  int n = 1;                     // choices per prompt
  bool stream = false;
  bool include_usage = false;    // stream_options.include_usage
  bool echo = false;             // completions: prepend the prompt text
  std::optional<int> logprobs;   // top-n per token (completions' logprobs, chat's top_logprobs)
  ChatMode mode = ChatMode::kChat;
  bool parse_tools = false;      // chat with tools (tool_choice not "none")
  std::string model;
};

// The tools a chat request forces a call of (tool_choice "required" or a
// named function): the reply is constrained to a call of one of them.
struct ForcedToolCalls {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // OpenAI tool objects
  bool parallel = true;  // more than one call allowed (parallel_tool_calls; a named function: one)
};

// A chat request's messages, tools and template options rendered to the
// prompt text (what chat completions and /tokenize both use).
struct ChatRender {
  std::string prompt;
  ChatMode mode = ChatMode::kChat;
  bool parse_tools = false;  // tools given and tool_choice not "none"
  ForcedToolCalls forced;
};

class StructuredOutputs;

struct ServedModel {
  std::string name;
  ChatFormat chat_format = ChatFormat::kV4;  // the model family's prompt format
  const Tokenizer* tokenizer = nullptr;
  int64_t max_model_len = 0;
  int64_t vocab_size = 0;
  // Compiles response_format, guided_* and forced tool calls (null: a
  // request asking for them is refused).
  StructuredOutputs* structured = nullptr;
};

// Sets params->grammar from the body's structured-output fields and the
// forced tool calls (see structured_output.h).
std::optional<ApiError> constrain_output(const nlohmann::ordered_json& body, const ForcedToolCalls& forced,
                                         ChatMode mode, const ServedModel& model, SamplingParams* params);

// Either a plan or an error.
struct PlanOrError {
  std::optional<GenerationPlan> plan;
  ApiError error;
};

PlanOrError plan_completion(const nlohmann::ordered_json& body, const ServedModel& model);
PlanOrError plan_chat(const nlohmann::ordered_json& body, const ServedModel& model);
// messages, tools, tool_choice, reasoning_effort, chat_template_kwargs
// (thinking, enable_thinking, drop_thinking), add_generation_prompt,
// continue_final_message, parallel_tool_calls (response_format:
// constrain_output).
std::optional<ApiError> render_chat(const nlohmann::ordered_json& body, ChatFormat format, ChatRender* out);
// The model field: absent, or the served model (else 404 model_not_found).
std::optional<ApiError> check_model(const nlohmann::ordered_json& body, const ServedModel& model, std::string* name);

// The body parsed as a JSON object, or a 400 naming the problem.
std::optional<nlohmann::ordered_json> parse_body(const std::string& body, ApiError* error);

}  // namespace dsv4
