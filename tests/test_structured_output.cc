// Structured outputs from the request to the tokens: the DSML tool-call
// grammar gives calls the chat parser reads back with arguments valid for
// each tool's schema, within the token budget; requests name what they
// cannot compile; the engine keeps greedy, sampled and speculative output
// inside the grammar (masking drafts too), starts after the reasoning in
// thinking mode, and stops where the grammar is complete.
#include <gtest/gtest.h>

#include <random>

#include "grammar/grammar_matcher.h"
#include "server/structured_output.h"
#include "tokenizer/byte_tokenizer.h"
#include "tokenizer/chat_encoding.h"

namespace dsv4 {
namespace {

using json = nlohmann::ordered_json;

// Byte tokens, a few longer ones (the DSML markers' pieces among them),
// EOS after them.
std::shared_ptr<const TokenVocabulary> byte_vocab() {
  static std::shared_ptr<const TokenVocabulary> v = [] {
    std::vector<std::string> text;
    for (int b = 0; b < 256; ++b) text.push_back(std::string(1, static_cast<char>(b)));
    for (const char* piece : {"｜", "<｜DSML｜", "</｜DSML｜", "parameter", "invoke", " name=\"", "\" string=\"", "true",
                              "false", "\">", "\n<", "12", "abc", "\":"})
      text.push_back(piece);
    const int32_t eos = static_cast<int32_t>(text.size());
    text.push_back("");
    std::vector<bool> special(text.size(), false);
    return std::make_shared<TokenVocabulary>(std::move(text), special, static_cast<int64_t>(text.size()) + 2, eos);
  }();
  return v;
}

// A random walk through the masks within `budget` tokens: the text, with
// whether it ended (EOS) inside the budget.
std::pair<std::string, bool> walk(const std::shared_ptr<const CompiledGrammar>& g, std::mt19937* rng, int64_t budget) {
  GrammarMatcher m(g);
  const TokenVocabulary& v = g->vocab();
  std::vector<uint64_t> bits((v.size() + 63) / 64);
  std::string text;
  for (int64_t used = 0; used < budget; ++used) {
    m.fill_mask(bits.data(), budget - used);
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < v.size(); ++id)
      if ((bits[id >> 6] >> (id & 63)) & 1) ids.push_back(id);
    if (ids.empty()) return {text + "<stuck>", false};
    const int32_t id = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(*rng)];
    EXPECT_TRUE(m.accept_token(id));
    if (id == v.eos()) return {text, true};
    text += v.text(id);
  }
  return {text, false};
}

const json kTools = json::parse(R"([
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
     "city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},
     "days":{"type":"integer","minimum":1,"maximum":7}},"required":["city"]}}},
  {"type":"function","function":{"name":"add","parameters":{"type":"object","properties":{
     "a":{"type":"number"},"b":{"type":"number"},"labels":{"type":"array","items":{"type":"string","maxLength":4},"maxItems":2}},
     "required":["a","b"]}}},
  {"type":"function","function":{"name":"no_args","parameters":{"type":"object","properties":{}}}}])");

TEST(ToolCallGrammar, WalksAreCallsTheParserReadsWithinTheBudget) {
  for (bool parallel : {true, false}) {
    auto grammar = tool_call_grammar(kTools, parallel);
    ASSERT_TRUE(grammar.ok()) << grammar.status().message();
    auto g = CompiledGrammar::compile(*grammar, byte_vocab());
    ASSERT_TRUE(g.ok()) << g.status().message();
    std::mt19937 rng(parallel ? 5 : 6);
    for (int i = 0; i < 300; ++i) {
      const int64_t budget = 120 + i;
      auto [text, ended] = walk(*g, &rng, budget);
      ASSERT_TRUE(ended) << "budget " << budget << ": " << text;
      auto parsed = parse_completion(text, ChatMode::kChat);
      ASSERT_TRUE(parsed.ok()) << parsed.status().message() << "\n" << text;
      EXPECT_EQ(parsed->content, "");
      ASSERT_GE(parsed->tool_calls.size(), 1u);
      if (!parallel) EXPECT_EQ(parsed->tool_calls.size(), 1u);
      for (const ParsedToolCall& call : parsed->tool_calls) {
        const json args = json::parse(call.arguments, nullptr, false);
        ASSERT_TRUE(args.is_object()) << call.arguments;
        if (call.name == "get_weather") {
          ASSERT_TRUE(args.contains("city") && args["city"].is_string()) << call.arguments;
          if (args.contains("unit")) EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit");
          if (args.contains("days")) EXPECT_TRUE(args["days"].is_number_integer() && args["days"] >= 1 && args["days"] <= 7);
        } else if (call.name == "add") {
          EXPECT_TRUE(args["a"].is_number() && args["b"].is_number()) << call.arguments;
          if (args.contains("labels")) EXPECT_LE(args["labels"].size(), 2u);
        } else {
          EXPECT_EQ(call.name, "no_args");
          EXPECT_TRUE(args.empty());
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsv4
