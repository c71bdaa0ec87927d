#include "server/choice_text.h"

#include <algorithm>
#include <cstring>

namespace dsv4 {
namespace {

// Length of the longest suffix of s that is a proper prefix of marker.
size_t partial_suffix(const std::string& s, const std::string& marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.compare(s.size() - n, n, marker, 0, n) == 0) return n;
  return 0;
}

}  // namespace

ChoiceText::ChoiceText(const Tokenizer* tokenizer, std::vector<std::string> stop, std::vector<int32_t> skip, bool chat,
                       ChatMode mode, bool parse_tools, ChatFormat format)
    : detok_(tokenizer, std::move(stop)),
      skip_(std::move(skip)),
      chat_(chat),
      parse_tools_(parse_tools),
      format_(format),
      calls_marker_(dsml_tags(format).calls_marker()),
      phase_(chat && mode == ChatMode::kThinking ? Phase::kReasoning : Phase::kContent) {}

TextDelta ChoiceText::add(const std::vector<int32_t>& tokens) {
  std::vector<int32_t> shown;
  for (int32_t t : tokens)
    if (std::find(skip_.begin(), skip_.end(), t) == skip_.end()) shown.push_back(t);
  return route(detok_.add(shown), false);
}

TextDelta ChoiceText::finish() {
  TextDelta d = route(detok_.flush(), true);
  if (phase_ == Phase::kTools) {
    auto parsed = parse_completion(tool_text_ + chat_tokens::kEos, ChatMode::kChat, format_);
    if (parsed.ok() && !parsed->tool_calls.empty()) {
      tool_calls_ = parsed->tool_calls;
    } else {  // not a well-formed block: it is text after all
      d.content += tool_text_;
      content_ += tool_text_;
    }
    tool_text_.clear();
  }
  return d;
}

TextDelta ChoiceText::route(const std::string& text, bool last) {
  TextDelta d;
  if (!chat_) {
    d.content = text;
    content_ += text;
    return d;
  }
  pending_ += text;
  for (;;) {
    if (phase_ == Phase::kReasoning) {
      const size_t end = pending_.find(chat_tokens::kEndThink);
      if (end != std::string::npos) {
        d.reasoning += pending_.substr(0, end);
        pending_.erase(0, end + std::strlen(chat_tokens::kEndThink));
        phase_ = Phase::kContent;
        continue;
      }
      const size_t keep = last ? 0 : partial_suffix(pending_, chat_tokens::kEndThink);
      d.reasoning += pending_.substr(0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
      break;
    }
    if (phase_ == Phase::kContent) {
      if (parse_tools_) {
        const size_t at = pending_.find(calls_marker_);
        if (at != std::string::npos) {
          d.content += pending_.substr(0, at);
          tool_text_ = pending_.substr(at);
          pending_.clear();
          phase_ = Phase::kTools;
          break;
        }
      }
      const size_t keep = last || !parse_tools_ ? 0 : partial_suffix(pending_, calls_marker_);
      d.content += pending_.substr(0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
      break;
    }
    tool_text_ += pending_;  // kTools
    pending_.clear();
    break;
  }
  reasoning_ += d.reasoning;
  content_ += d.content;
  return d;
}

}  // namespace dsv4
