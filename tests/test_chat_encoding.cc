// DeepSeek-V4 chat encoding against ../shared/chat-encoding, byte for byte,
// and completions parsed back into OpenAI messages.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tokenizer/chat_encoding.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Case N's messages (an object's tools belong on messages[0]) and mode.
ordered_json case_messages(int n) {
  ordered_json in = ordered_json::parse(read(std::string(DSV4_CHAT_ENCODING_DIR) + "/test_input_" + std::to_string(n) + ".json"));
  if (in.is_object()) {
    ordered_json messages = in["messages"];
    if (in.contains("tools")) messages[0]["tools"] = in["tools"];
    return messages;
  }
  return in;
}

class ChatEncodingCase : public ::testing::TestWithParam<int> {};

TEST_P(ChatEncodingCase, RendersByteForByte) {
  const int n = GetParam();
  ChatOptions o;
  o.mode = n == 4 ? ChatMode::kChat : ChatMode::kThinking;
  auto got = encode_chat(case_messages(n), o);
  ASSERT_TRUE(got.ok()) << got.status().message();
  const std::string want = read(std::string(DSV4_CHAT_ENCODING_DIR) + "/test_output_" + std::to_string(n) + ".txt");
  ASSERT_FALSE(want.empty());
  if (*got != want) {
    size_t i = 0;
    while (i < got->size() && i < want.size() && (*got)[i] == want[i]) ++i;
    FAIL() << "first difference at byte " << i << ":\n got: " << got->substr(i, 80) << "\nwant: " << want.substr(i, 80);
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, ChatEncodingCase, ::testing::Values(1, 2, 3, 4));

// Every assistant turn of a case, rendered and parsed back, gives the turn.
TEST_P(ChatEncodingCase, AssistantTurnsParseBack) {
  const int n = GetParam();
  const ChatMode mode = n == 4 ? ChatMode::kChat : ChatMode::kThinking;
  const ordered_json messages = case_messages(n);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ordered_json& m = messages[i];
    if (m["role"] != "assistant" || messages[i - 1].contains("task")) continue;
    // The completion as the model writes it: reasoning, </think>, content,
    // tool calls, EOS (what encode_chat renders for a last turn).
    ordered_json one = ordered_json::array({ordered_json{{"role", "user"}, {"content", "q"}}, m});
    if (messages[0].contains("tools")) one[0]["tools"] = messages[0]["tools"];  // keeps reasoning (no dropping)
    ChatOptions o;
    o.mode = mode;
    o.drop_thinking = false;
    auto rendered = encode_chat(one, o);
    ASSERT_TRUE(rendered.ok()) << rendered.status().message();
    const std::string prefix = std::string(chat_tokens::kBos) + chat_tokens::kUser + "q" + chat_tokens::kAssistant +
                               (mode == ChatMode::kThinking ? chat_tokens::kThink : chat_tokens::kEndThink);
    ASSERT_EQ(rendered->rfind(prefix, 0), 0u);
    auto parsed = parse_completion(rendered->substr(prefix.size()), mode);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    EXPECT_EQ(parsed->reasoning_content, mode == ChatMode::kThinking ? m.value("reasoning_content", "") : "");
    EXPECT_EQ(parsed->content, m.value("content", ""));
    const size_t calls = m.contains("tool_calls") ? m["tool_calls"].size() : 0;
    ASSERT_EQ(parsed->tool_calls.size(), calls);
    for (size_t c = 0; c < calls; ++c) {
      EXPECT_EQ(parsed->tool_calls[c].name, m["tool_calls"][c]["function"]["name"]);
      EXPECT_EQ(ordered_json::parse(parsed->tool_calls[c].arguments),
                ordered_json::parse(m["tool_calls"][c]["function"]["arguments"].get<std::string>()));
    }
  }
}

TEST(ChatEncoding, ReadmeRoundTrips) {
  auto one = parse_completion(
      "The user wants to know the weather in Beijing. I should use the get_weather tool.</think>\n\n"
      "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"unit\" string=\"true\">celsius</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "</｜DSML｜tool_calls><｜end▁of▁sentence｜>",
      ChatMode::kThinking);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->reasoning_content, "The user wants to know the weather in Beijing. I should use the get_weather tool.");
  EXPECT_EQ(one->content, "");
  ASSERT_EQ(one->tool_calls.size(), 1u);
  EXPECT_EQ(one->tool_calls[0].name, "get_weather");
  EXPECT_EQ(one->tool_calls[0].arguments, R"({"location": "Beijing", "unit": "celsius"})");
  auto two = parse_completion(
      "The user asks about the capital of France. It is Paris.</think>The capital of France is Paris.<｜end▁of▁sentence｜>",
      ChatMode::kThinking);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->reasoning_content, "The user asks about the capital of France. It is Paris.");
  EXPECT_EQ(two->content, "The capital of France is Paris.");
  EXPECT_TRUE(two->tool_calls.empty());
  EXPECT_FALSE(parse_completion("no end of reasoning", ChatMode::kThinking).ok());
  EXPECT_FALSE(parse_completion("a<｜end▁of▁sentence｜>trailing", ChatMode::kChat).ok());
}

TEST(ChatEncoding, NonStringArgumentsAndPythonJson) {
  ordered_json msgs = ordered_json::parse(R"([{"role": "user", "content": "x"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f",
     "arguments": "{\"n\": 3, \"opts\": {\"a\": [1, 2.5, true, null]}, \"s\": \"é\"}"}}]}])");
  auto r = encode_chat(msgs, ChatOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->find(R"(<｜DSML｜parameter name="n" string="false">3</｜DSML｜parameter>)"), std::string::npos) << *r;
  EXPECT_NE(r->find(R"(<｜DSML｜parameter name="opts" string="false">{"a": [1, 2.5, true, null]}</｜DSML｜parameter>)"),
            std::string::npos)
      << *r;
  EXPECT_NE(r->find(R"(<｜DSML｜parameter name="s" string="true">é</｜DSML｜parameter>)"), std::string::npos) << *r;
  EXPECT_EQ(python_json_dumps(ordered_json::parse(R"({"b": 1e-05, "a": "\n\u0001", "c": 1.0})")),
            R"({"b": 1e-05, "a": "\n\u0001", "c": 1.0})");
  auto bad = encode_chat(ordered_json::parse(R"([{"role": "wizard", "content": "x"}])"), ChatOptions{});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown role 'wizard'"), std::string::npos);
}

// Fields of the wrong JSON type: flags take Python's truth value as the
// reference encoder's `if message.get(...)` does, and tools that are not a
// list of objects are an error naming the message (never an exception).
TEST(ChatEncoding, FieldsOfTheWrongTypeAreTruthyOrErrors) {
  const auto render = [](const char* text) { return encode_chat(ordered_json::parse(text), ChatOptions{}); };
  auto flagged = render(R"([{"role": "user", "content": "x"}, {"role": "assistant", "content": "a", "wo_eos": 1}])");
  auto cleared = render(R"([{"role": "user", "content": "x"}, {"role": "assistant", "content": "a", "wo_eos": ""}])");
  auto plain = render(R"([{"role": "user", "content": "x"}, {"role": "assistant", "content": "a"}])");
  ASSERT_TRUE(flagged.ok() && cleared.ok() && plain.ok());
  EXPECT_EQ(*cleared, *plain);
  EXPECT_EQ(*flagged + "<｜end▁of▁sentence｜>", *plain);
  auto parts = render(R"([{"role": "user", "content": [{"type": 7}, {"type": "text", "text": "t"}]}])");
  ASSERT_TRUE(parts.ok());
  EXPECT_NE(parts->find("[Unsupported part]\n\nt"), std::string::npos) << *parts;
  for (const char* tools : {R"("get_weather")", R"({"a": 1})", R"([5])"}) {
    auto bad = render((std::string(R"([{"role": "system", "content": "s", "tools": )") + tools +
                       R"(}, {"role": "user", "content": "x"}])").c_str());
    ASSERT_FALSE(bad.ok()) << tools;
    EXPECT_NE(bad.status().message().find("messages[0].tools must be an array of tool objects"), std::string::npos)
        << bad.status().message();
  }
}

}  // namespace
}  // namespace dsv4
