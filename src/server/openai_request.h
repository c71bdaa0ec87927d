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
  std::string to_json() const;
};

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

struct ServedModel {
  std::string name;
  const Tokenizer* tokenizer = nullptr;
  int64_t max_model_len = 0;
  int64_t vocab_size = 0;
};

// Either a plan or an error.
struct PlanOrError {
  std::optional<GenerationPlan> plan;
  ApiError error;
};

PlanOrError plan_completion(const nlohmann::ordered_json& body, const ServedModel& model);
PlanOrError plan_chat(const nlohmann::ordered_json& body, const ServedModel& model);

// The body parsed as a JSON object, or a 400 naming the problem.
std::optional<nlohmann::ordered_json> parse_body(const std::string& body, ApiError* error);

}  // namespace dsv4
