// DeepSeek-V4's chat prompt format and its reverse. encode_chat renders an
// OpenAI-style message list the way the official encoder does (chat and
// thinking modes, dropped earlier reasoning, developer and latest_reminder
// roles, tools as the DSML schema block, tool results folded into the next
// user turn, tasks); parse_completion turns a completion back into
// reasoning_content, content and tool calls.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace dsv4 {

namespace chat_tokens {
inline constexpr char kBos[] = "<｜begin▁of▁sentence｜>";
inline constexpr char kEos[] = "<｜end▁of▁sentence｜>";
inline constexpr char kUser[] = "<｜User｜>";
inline constexpr char kAssistant[] = "<｜Assistant｜>";
inline constexpr char kLatestReminder[] = "<｜latest_reminder｜>";
inline constexpr char kThink[] = "<think>";
inline constexpr char kEndThink[] = "</think>";
inline constexpr char kToolCallsMarker[] = "\n\n<｜DSML｜tool_calls";
}  // namespace chat_tokens

enum class ChatMode { kChat, kThinking };

struct ChatOptions {
  ChatMode mode = ChatMode::kChat;
  bool drop_thinking = true;      // drop earlier turns' reasoning (unless tools are present)
  std::string reasoning_effort;   // "", "high" or "max" ("max" adds its instruction)
  bool add_bos = true;
  // After a final user message, open the assistant's turn (false: the
  // prompt ends with the user's text, as for scoring or /tokenize).
  bool add_generation_prompt = true;
};

// messages: a JSON array of {role, content, reasoning_content, tool_calls,
// tool_call_id, tools, response_format, task, wo_eos}; key order is kept.
// Errors name the message and the problem.
StatusOr<std::string> encode_chat(const nlohmann::ordered_json& messages, const ChatOptions& options);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON text
};

struct ParsedCompletion {
  std::string reasoning_content;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
};

// text: what the model generated after the prompt (which ended in <think>
// or </think>), with or without the final EOS.
StatusOr<ParsedCompletion> parse_completion(const std::string& text, ChatMode mode);

// json.dumps(value, ensure_ascii=False) as Python writes it: ", " and ": "
// separators, keys in their order, non-ASCII as is.
std::string python_json_dumps(const nlohmann::ordered_json& value);

}  // namespace dsv4
