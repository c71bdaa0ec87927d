// DeepSeek-V4's chat prompt format and its reverse. encode_chat renders an
// OpenAI-style message list the way the official encoder does (chat and
// thinking modes, dropped earlier reasoning, developer and latest_reminder
// roles, tools as the DSML schema block, tool results folded into the next
// user turn, tasks); parse_completion turns a completion back into
// reasoning_content, content and tool calls. DeepSeek-V4.1's format
// (ChatFormat::kV41, as its release's encoding.py and vLLM's
// deepseek_v41_encoding render it) differs in a few places: a <｜System｜>
// token opens system turns (a system message may come mid-conversation and
// is then answered like a user's), the reasoning effort is a number from 1
// to 100 stated at the start in thinking mode, and the DSML tags are spelt
// with a space (<｜DSML｜ calls>, <｜DSML｜ invoke>, <｜DSML｜ parameter>).
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
inline constexpr char kSystem[] = "<｜System｜>";  // DeepSeek-V4.1
}  // namespace chat_tokens

enum class ChatMode { kChat, kThinking };
enum class ChatFormat { kV4, kV41 };

// Why a content part that is not text (an image) is refused, for a model of
// the format's family: V4 reads text only; V4.1 has a vision tower this
// build does not load.
const char* text_only_reason(ChatFormat format);

// The DSML tag names of a format: the tool-calls block, an invoke, a
// parameter (V4.1 puts a space before each).
struct DsmlTags {
  std::string calls, invoke, parameter;
  std::string open(const std::string& tag) const { return std::string("<｜DSML｜") + tag; }
  std::string close(const std::string& tag) const { return std::string("</｜DSML｜") + tag + ">"; }
  // What starts a completion's tool calls: "\n\n<｜DSML｜" + calls.
  std::string calls_marker() const { return "\n\n" + open(calls); }
};
const DsmlTags& dsml_tags(ChatFormat format);

// V4.1's reasoning effort: low 50, high 75 (the default), max 100 (xhigh
// is accepted as 75, as vLLM does), or a number from 1 to 100; an error
// names what is accepted.
StatusOr<int> v41_reasoning_budget(const std::string& effort);

struct ChatOptions {
  ChatFormat format = ChatFormat::kV4;
  ChatMode mode = ChatMode::kChat;
  bool drop_thinking = true;      // drop earlier turns' reasoning (unless tools are present)
  // V4: "", "high" or "max" ("max" adds its instruction). V4.1: "" (high),
  // low, high, xhigh, max or a number from 1 to 100 (v41_reasoning_budget).
  std::string reasoning_effort;
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
StatusOr<ParsedCompletion> parse_completion(const std::string& text, ChatMode mode,
                                           ChatFormat format = ChatFormat::kV4);

// json.dumps(value, ensure_ascii=False) as Python writes it: ", " and ": "
// separators, keys in their order, non-ASCII as is.
std::string python_json_dumps(const nlohmann::ordered_json& value);

}  // namespace dsv4
