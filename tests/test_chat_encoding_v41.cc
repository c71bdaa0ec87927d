// DeepSeek-V4.1's chat format (ChatFormat::kV41) where it differs from
// V4's, rendered as its release's encoding.py and vLLM's
// deepseek_v41_encoding render it: the <｜System｜> turn, the numeric
// reasoning effort, mid-conversation system messages, and DSML tags spelt
// with a space; completions in that spelling parse back.
#include <gtest/gtest.h>

#include "tokenizer/chat_encoding.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;

const std::string kBos = "<｜begin▁of▁sentence｜>", kEos = "<｜end▁of▁sentence｜>";
const std::string kEffort75 =
    "Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the reasoning)\n\n";

std::string render(const ordered_json& messages, ChatMode mode, const std::string& effort = "") {
  ChatOptions o;
  o.format = ChatFormat::kV41;
  o.mode = mode;
  o.reasoning_effort = effort;
  auto r = encode_chat(messages, o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : "";
}

TEST(ChatEncodingV41, ThinkingOpensWithTheSystemTurnAndTheEffort) {
  const ordered_json sys_user = ordered_json::parse(R"([{"role":"system","content":"SYS"},{"role":"user","content":"Hi"}])");
  EXPECT_EQ(render(sys_user, ChatMode::kThinking), kBos + "<｜System｜>" + kEffort75 + "SYS<｜User｜>Hi<｜Assistant｜><think>");
  const ordered_json user = ordered_json::parse(R"([{"role":"user","content":"Hi"}])");
  EXPECT_EQ(render(user, ChatMode::kThinking), kBos + "<｜System｜>" + kEffort75 + "<｜User｜>Hi<｜Assistant｜><think>");
  // The effort's names and numbers.
  for (const auto& [effort, budget] : std::vector<std::pair<std::string, std::string>>{
           {"low", "50"}, {"high", "75"}, {"xhigh", "75"}, {"max", "100"}, {"30", "30"}, {"100", "100"}}) {
    const std::string out = render(user, ChatMode::kThinking, effort);
    EXPECT_NE(out.find("Reasoning Effort: " + budget + " (range 1-100"), std::string::npos) << effort << ": " << out;
  }
  for (const char* bad : {"medium", "0", "101", "lots"}) {
    ChatOptions o;
    o.format = ChatFormat::kV41;
    o.mode = ChatMode::kChat;  // checked in chat mode too, as the reference does
    o.reasoning_effort = bad;
    auto r = encode_chat(user, o);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("low, high, xhigh, max or a number from 1 to 100"), std::string::npos);
  }
}

TEST(ChatEncodingV41, ChatModeMarksOnlyASystemMessage) {
  const ordered_json sys_user = ordered_json::parse(R"([{"role":"system","content":"SYS"},{"role":"user","content":"Hi"}])");
  EXPECT_EQ(render(sys_user, ChatMode::kChat), kBos + "<｜System｜>SYS<｜User｜>Hi<｜Assistant｜></think>");
  // Without a system message chat mode renders as V4 does.
  const ordered_json user = ordered_json::parse(R"([{"role":"user","content":"Hi"}])");
  ChatOptions v4;
  EXPECT_EQ(render(user, ChatMode::kChat), *encode_chat(user, v4));
}

TEST(ChatEncodingV41, AMidConversationSystemMessageIsAnsweredLikeAUsers) {
  const ordered_json m = ordered_json::parse(
      R"([{"role":"user","content":"u1"},{"role":"assistant","content":"c1","reasoning_content":"r1"},
          {"role":"system","content":"NEW"}])");
  EXPECT_EQ(render(m, ChatMode::kThinking),
            kBos + "<｜System｜>" + kEffort75 + "<｜User｜>u1<｜Assistant｜></think>c1" + kEos +
                "<｜System｜>NEW<｜Assistant｜><think>");
  // A developer message is a system one in V4.1.
  const ordered_json dev = ordered_json::parse(R"([{"role":"developer","content":"D"},{"role":"user","content":"Hi"}])");
  EXPECT_EQ(render(dev, ChatMode::kChat), kBos + "<｜System｜>D<｜User｜>Hi<｜Assistant｜></think>");
}

TEST(ChatEncodingV41, ToolCallsAreSpeltWithSpacedTagsAndParseBack) {
  const ordered_json m = ordered_json::parse(R"([
    {"role":"system","content":"","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]},
    {"role":"user","content":"call f"},
    {"role":"assistant","content":"C","tool_calls":[{"id":"1","type":"function",
      "function":{"name":"f","arguments":"\"{\\\"x\\\": 1, \\\"s\\\": \\\"v\\\"}\""}}]},
    {"role":"tool","tool_call_id":"1","content":"2"}])");
  const std::string out = render(m, ChatMode::kChat);
  // The tools section names the spaced block, and the call (its arguments
  // JSON encoded twice) is decoded and spelt the same way.
  EXPECT_NE(out.find("by writing a \"<｜DSML｜ calls>\" block like the following:\n\n<｜DSML｜ calls>\n"
                     "<｜DSML｜ invoke name=\"$TOOL_NAME\">\n"
                     "<｜DSML｜ parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜ parameter>"),
            std::string::npos)
      << out;
  const std::string call =
      "C\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"x\" string=\"false\">1</｜DSML｜ parameter>\n"
      "<｜DSML｜ parameter name=\"s\" string=\"true\">v</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>" + kEos;
  EXPECT_NE(out.find(call), std::string::npos) << out;
  EXPECT_EQ(out.find("<｜DSML｜tool_calls>"), std::string::npos);
  EXPECT_NE(out.find("<｜User｜><tool_result>2</tool_result><｜Assistant｜></think>"), std::string::npos) << out;

  auto parsed = parse_completion(call, ChatMode::kChat, ChatFormat::kV41);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->content, "C");
  ASSERT_EQ(parsed->tool_calls.size(), 1u);
  EXPECT_EQ(parsed->tool_calls[0].name, "f");
  EXPECT_EQ(parsed->tool_calls[0].arguments, "{\"x\": 1, \"s\": \"v\"}");
  // V4's spelling is not V4.1's: such text has no tool calls block.
  auto v4_text = parse_completion("C\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>" + kEos, ChatMode::kChat,
                                  ChatFormat::kV41);
  EXPECT_FALSE(v4_text.ok());
}

}  // namespace
}  // namespace dsv4
