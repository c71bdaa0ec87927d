// One choice's text as its tokens arrive: detokenized without broken UTF-8,
// cut at stop strings, and for chat split into reasoning_content, content
// and (when tools are on) DSML tool calls, which are held back until they
// can be parsed whole.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/chat_encoding.h"
#include "tokenizer/incremental_detokenizer.h"

namespace dsv4 {

struct TextDelta {
  std::string reasoning;
  std::string content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

class ChoiceText {
 public:
  // skip: token ids whose text never shows (BOS, EOS).
  ChoiceText(const Tokenizer* tokenizer, std::vector<std::string> stop, std::vector<int32_t> skip, bool chat,
             ChatMode mode, bool parse_tools, ChatFormat format = ChatFormat::kV4);

  TextDelta add(const std::vector<int32_t>& tokens);
  // At the end: what was held back, and the tool calls if any parse.
  TextDelta finish();
  bool stopped() const { return detok_.stopped(); }
  // Still in the reasoning part (thinking mode, before </think>).
  bool in_reasoning() const { return phase_ == Phase::kReasoning; }
  const std::string& stop_string() const { return detok_.stop_string(); }  // the one that matched

  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ParsedToolCall>& tool_calls() const { return tool_calls_; }

 private:
  TextDelta route(const std::string& text, bool last);

  IncrementalDetokenizer detok_;
  std::vector<int32_t> skip_;
  bool chat_, parse_tools_;
  ChatFormat format_;
  std::string calls_marker_;  // what starts the tool calls in this format
  enum class Phase { kReasoning, kContent, kTools } phase_;
  std::string pending_, tool_text_;
  std::string reasoning_, content_;
  std::vector<ParsedToolCall> tool_calls_;
};

}  // namespace dsv4
