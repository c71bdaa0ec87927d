// Structured outputs from the request to the tokens: the DSML tool-call
// grammar gives calls the chat parser reads back with arguments valid for
// each tool's schema, within the token budget; requests name what they
// cannot compile; the engine keeps greedy, sampled and speculative output
// inside the grammar (masking drafts too), starts after the reasoning in
// thinking mode, and stops where the grammar is complete.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "grammar/ebnf_grammar.h"
#include "grammar/grammar_matcher.h"
#include "grammar/json_schema_grammar.h"
#include "grammar/regex_grammar.h"
#include "runtime/engine.h"
#include "runtime/token_constraint.h"
#include "server/structured_output.h"
#include "temp_dir.h"
#include "test_util.h"
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

// 300 walks a grammar (75 in sanitized builds, where each mask takes ~20x
// longer: the same code, fewer random paths through it).
TEST(ToolCallGrammar, WalksAreCallsTheParserReadsWithinTheBudget) {
  const int walks = testing::kSanitized ? 75 : 300;
  for (ChatFormat format : {ChatFormat::kV4, ChatFormat::kV41})  // V4.1: tags spelt with a space
  for (bool parallel : {true, false}) {
    auto grammar = tool_call_grammar(kTools, parallel, format);
    ASSERT_TRUE(grammar.ok()) << grammar.status().message();
    auto g = CompiledGrammar::compile(*grammar, byte_vocab());
    ASSERT_TRUE(g.ok()) << g.status().message();
    std::mt19937 rng(parallel ? 5 : 6);
    for (int i = 0; i < walks; ++i) {
      const int64_t budget = 120 + i * 300 / walks;
      auto [text, ended] = walk(*g, &rng, budget);
      ASSERT_TRUE(ended) << "budget " << budget << ": " << text;
      auto parsed = parse_completion(text, ChatMode::kChat, format);
      ASSERT_TRUE(parsed.ok()) << parsed.status().message() << "\n" << text;
      EXPECT_EQ(parsed->content, "");
      ASSERT_GE(parsed->tool_calls.size(), 1u);
      if (!parallel) {
        EXPECT_EQ(parsed->tool_calls.size(), 1u);
      }
      for (const ParsedToolCall& call : parsed->tool_calls) {
        const json args = json::parse(call.arguments, nullptr, false);
        ASSERT_TRUE(args.is_object()) << call.arguments;
        if (call.name == "get_weather") {
          ASSERT_TRUE(args.contains("city") && args["city"].is_string()) << call.arguments;
          if (args.contains("unit")) {
            EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit");
          }
          if (args.contains("days")) {
            EXPECT_TRUE(args["days"].is_number_integer() && args["days"] >= 1 && args["days"] <= 7);
          }
        } else if (call.name == "add") {
          EXPECT_TRUE(args["a"].is_number() && args["b"].is_number()) << call.arguments;
          if (args.contains("labels")) {
            EXPECT_LE(args["labels"].size(), 2u);
          }
        } else {
          EXPECT_EQ(call.name, "no_args");
          EXPECT_TRUE(args.empty());
        }
      }
    }
  }
}

TEST(TokenConstraint, MasksForbiddenTokensAndStartsAfterItsText) {
  auto g = CompiledGrammar::compile(*choice_grammar({"yes", "no"}), byte_vocab());
  ASSERT_TRUE(g.ok());
  const int64_t vocab = byte_vocab()->size();
  const int32_t eos = byte_vocab()->eos();
  TokenConstraint c(*g, "</think>");
  std::vector<float> logits(vocab, 1.0f);
  // Reasoning: nothing is masked; "</think>" spelled by several tokens
  // starts the grammar.
  EXPECT_FALSE(c.active());
  ASSERT_TRUE(c.mask(logits.data(), 100));
  for (float x : logits) EXPECT_EQ(x, 1.0f);
  for (char ch : std::string("ok <</thi")) c.take(static_cast<uint8_t>(ch));
  EXPECT_FALSE(c.active());
  c.take(static_cast<uint8_t>('n'));
  c.take(static_cast<uint8_t>('k'));
  EXPECT_FALSE(c.active());
  c.take(static_cast<uint8_t>('>'));
  EXPECT_TRUE(c.active());
  ASSERT_TRUE(c.mask(logits.data(), 100));
  for (int64_t id = 0; id < vocab; ++id)
    EXPECT_EQ(std::isinf(logits[id]), id != 'y' && id != 'n') << "token " << id;
  // Drafts: the allowed prefix, and no state change.
  EXPECT_EQ(c.allowed_prefix({'n', 'o', eos, 'x'}), 3);
  EXPECT_EQ(c.allowed_prefix({'y', 'o'}), 1);
  c.take('n');
  c.take('o');
  std::fill(logits.begin(), logits.end(), 0.0f);
  ASSERT_TRUE(c.mask(logits.data(), 100));
  for (int64_t id = 0; id < vocab; ++id) EXPECT_EQ(std::isinf(logits[id]), id != eos) << "token " << id;
  c.take(eos);
  EXPECT_TRUE(c.finished());
  // A drafted "</think>" starts the grammar for the drafts after it.
  TokenConstraint d(*g, "</think>");
  std::vector<int32_t> drafts;
  for (char ch : std::string("</think>ye")) drafts.push_back(static_cast<uint8_t>(ch));
  drafts.push_back('x');
  EXPECT_EQ(d.allowed_prefix(drafts), 10);
  EXPECT_FALSE(d.active());
}

// The embedded default model (random: unconstrained it writes bytes at
// random), with an MTP block that copies the last block so drafts are often
// accepted.
const std::string& mtp_model_dir() {
  static testing::TempDir dir("dsv4_test_structured_mtp");
  static const bool written = [] {
    auto config = synthetic_config("default");
    SyntheticOptions o;
    o.mtp_copies_last_block = true;
    return config.ok() && write_synthetic_checkpoint(*config, o, dir.path()).ok();
  }();
  EXPECT_TRUE(written);
  return dir.path();
}

struct Served {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<FinishReason> finish;
  std::vector<std::vector<SampledToken>> logprobs;
  std::map<int64_t, std::vector<std::vector<float>>> raw;  // request -> the logits it sampled from, unmasked
  EngineStats stats;
};

Served run(const DeepseekV4& model, const EngineOptions& options, const std::vector<std::vector<int32_t>>& prompts,
        const std::vector<SamplingParams>& params) {
  auto engine = Engine::create(&model, options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  Served out;
  out.tokens.resize(prompts.size());
  out.finish.resize(prompts.size());
  out.logprobs.resize(prompts.size());
  const int64_t vocab = model.config().vocab_size;
  (*engine)->set_logits_observer([&](int64_t id, int64_t, const float* logits) {
    out.raw[id].emplace_back(logits, logits + vocab);
  });
  std::map<int64_t, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto id = (*engine)->add_request(prompts[i], params[i]);
    EXPECT_TRUE(id.ok()) << id.status().message();
    index[*id] = i;
  }
  while ((*engine)->has_unfinished())
    for (const RequestOutput& o : (*engine)->step()) {
      const size_t i = index.at(o.id);
      out.tokens[i].insert(out.tokens[i].end(), o.new_tokens.begin(), o.new_tokens.end());
      out.logprobs[i].insert(out.logprobs[i].end(), o.new_logprobs.begin(), o.new_logprobs.end());
      if (o.finished) out.finish[i] = o.finish_reason;
    }
  out.stats = (*engine)->stats();
  return out;
}

// Whether `tokens` (EOS last) are a complete text of the grammar.
bool complete(const std::shared_ptr<const CompiledGrammar>& g, const std::vector<int32_t>& tokens, std::string* text) {
  GrammarMatcher m(g);
  text->clear();
  for (int32_t t : tokens) {
    if (!m.accept_token(t)) return false;
    if (t != g->vocab().eos()) *text += g->vocab().text(t);
  }
  return m.finished();
}

TEST(ConstrainedDecoding, GreedySampledAndSpeculativeStayInTheGrammar) {
  auto model = load_deepseek_v4(mtp_model_dir());
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelConfig& c = (*model)->config();
  ByteTokenizer tokenizer(c.vocab_size);
  auto vocab = grammar_vocabulary(tokenizer, c.vocab_size, c.bos_token_id, c.eos_token_id);
  const json schema = json::parse(R"({"type":"object","properties":{
      "id":{"type":"integer","minimum":-5,"maximum":500},"tags":{"type":"array","items":{"enum":["a","bb",null]},"maxItems":3},
      "name":{"type":"string","maxLength":6}},"required":["id","tags","name"],"additionalProperties":false})");
  std::vector<std::shared_ptr<const CompiledGrammar>> grammars;
  for (StatusOr<Grammar> g : {json_schema_grammar(schema), regex_grammar("[a-c]{2,5}-\\d{1,3}"),
                                      choice_grammar({"alpha", "beta", "gamma"}), StatusOr<Grammar>(json_object_grammar()),
                                      ebnf_grammar("root ::= \"(\" [0-9]+ (\"+\" [0-9]+)* \")\"")}) {
    ASSERT_TRUE(g.ok()) << g.status().message();
    auto compiled = CompiledGrammar::compile(*g, vocab);
    ASSERT_TRUE(compiled.ok()) << compiled.status().message();
    grammars.push_back(*compiled);
  }
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 20; ++i) {
    std::vector<int32_t> prompt(5 + i * 7);
    for (size_t k = 0; k < prompt.size(); ++k) prompt[k] = static_cast<int32_t>((k * 37 + i * 11 + 3) % c.vocab_size);
    prompts.push_back(prompt);
    SamplingParams p;
    p.temperature = i % 2 ? 1.0f : 0.0f;
    p.seed = static_cast<uint64_t>(i);
    p.max_tokens = 60 + 7 * i;
    p.grammar = grammars[i % grammars.size()];
    if (i % 4 == 1) p.logprobs = 2;
    params.push_back(p);
  }
  EngineOptions o;
  o.scheduler.max_num_seqs = 8;
  o.cache.memory_bytes = int64_t{256} << 20;
  const Served plain = run(**model, o, prompts, params);
  o.scheduler.num_speculative_tokens = 3;
  const Served spec = run(**model, o, prompts, params);
  for (const Served* r : {&plain, &spec})
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::string text;
      EXPECT_TRUE(complete(params[i].grammar, r->tokens[i], &text))
          << (r == &spec ? "speculative " : "") << "request " << i << ": '" << text << "'";
      EXPECT_EQ(r->finish[i], FinishReason::kStop) << "request " << i;
      EXPECT_LE(static_cast<int64_t>(r->tokens[i].size()), params[i].max_tokens);
      if (i % grammars.size() == 0) {
        EXPECT_TRUE(json::accept(text)) << text;
      }
    }
  // Masking keeps greedy verification exact: the same tokens with drafts.
  for (size_t i = 0; i < prompts.size(); i += 2) EXPECT_EQ(spec.tokens[i], plain.tokens[i]) << "request " << i;
  EXPECT_GT(spec.stats.drafts_accepted, 0);
  // Logprobs are the model's own (of the unmasked logits).
  for (size_t i = 1; i < prompts.size(); i += 4) {
    const auto& raw = plain.raw.at(static_cast<int64_t>(i + 1));
    ASSERT_EQ(plain.logprobs[i].size(), plain.tokens[i].size());
    for (size_t k = 0; k < plain.tokens[i].size(); ++k) {
      const SampledToken want = score_token(raw[k].data(), c.vocab_size, plain.tokens[i][k], 2);
      EXPECT_EQ(plain.logprobs[i][k].logprob, want.logprob) << "request " << i << " token " << k;
      EXPECT_EQ(plain.logprobs[i][k].top, want.top);
    }
  }
}

TEST(ConstrainedDecoding, DSparkSampledDraftsAndThinkingAndIgnoreEos) {
  // A drafter that repeats the last token, so digits run on in drafts the
  // grammar allows (others it cuts).
  testing::TempDir dir("dsv4_test_structured_dspark");
  SyntheticOptions so;
  so.dspark_drafts_agree = true;
  auto model = testing::synthetic_dspark_model(dir.path(), so);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelConfig& c = (*model)->config();
  ByteTokenizer tokenizer(c.vocab_size);
  auto vocab = grammar_vocabulary(tokenizer, c.vocab_size, c.bos_token_id, c.eos_token_id);
  auto g = CompiledGrammar::compile(*regex_grammar("(yes|no) [0-9]{1,12}"), vocab);
  ASSERT_TRUE(g.ok());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 12; ++i) {
    prompts.push_back(std::vector<int32_t>(10 + 9 * i, static_cast<int32_t>(40 + i)));
    SamplingParams p;
    p.temperature = i % 3 == 0 ? 0.0f : 0.8f;
    p.seed = static_cast<uint64_t>(100 + i);
    p.max_tokens = 30;
    p.grammar = *g;
    p.ignore_eos = i % 2 == 1;  // a complete grammar ends the request anyway
    if (i % 4 == 2) {
      // "Thinking": the grammar starts after '~', which the bias makes the
      // first token; before it the output is free.
      p.grammar_after = "~";
      p.logit_bias = {{'~', 100.0f}};
    }
    params.push_back(p);
  }
  EngineOptions o;
  o.scheduler.max_num_seqs = 6;
  o.scheduler.num_speculative_tokens = 3;
  o.scheduler.drafter = SchedulerOptions::Drafter::kDSpark;
  o.cache.memory_bytes = int64_t{256} << 20;
  const Served r = run(**model, o, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> tokens = r.tokens[i];
    if (!params[i].grammar_after.empty()) {
      ASSERT_FALSE(tokens.empty());
      EXPECT_EQ(tokens[0], '~') << "request " << i;
      tokens.erase(tokens.begin());
    }
    std::string text;
    EXPECT_TRUE(complete(*g, tokens, &text)) << "request " << i << ": '" << text << "'";
    EXPECT_EQ(r.finish[i], FinishReason::kStop) << "request " << i;
  }
  EXPECT_GT(r.stats.drafts_accepted, 0);
  EXPECT_GT(r.stats.drafts_proposed, r.stats.drafts_accepted);
}

TEST(StructuredOutputRequests, FieldsCompileOrNameWhatFails) {
  ByteTokenizer tokenizer(512);
  StructuredOutputs structured(grammar_vocabulary(tokenizer, 512, 0, 1));
  ServedModel m;
  m.name = "m";
  m.tokenizer = &tokenizer;
  m.max_model_len = 4096;
  m.vocab_size = 512;
  m.structured = &structured;
  auto chat = [&](const char* extra) {
    json body = json::parse(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":50})");
    const json fields = json::parse(extra);
    for (const auto& [k, v] : fields.items()) body[k] = v;
    return plan_chat(body, m);
  };
  auto error = [&](const char* extra) {
    const PlanOrError p = chat(extra);
    EXPECT_FALSE(p.plan) << extra;
    return p.error.param + ": " + p.error.message;
  };
  // Each form compiles, once: the same text is a cache hit.
  for (const char* extra :
       {R"({"response_format":{"type":"json_object"}})", R"({"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"integer"}}}})",
        R"({"guided_json":"{\"enum\":[1,2]}"})", R"({"guided_regex":"a+b"})", R"({"guided_choice":["x","y"]})",
        R"({"guided_grammar":"root ::= \"a\"+"})", R"({"structured_outputs":{"regex":"a+b"}})"}) {
    const PlanOrError p = chat(extra);
    ASSERT_TRUE(p.plan) << extra << ": " << p.error.message;
    EXPECT_TRUE(p.plan->params.grammar) << extra;
    EXPECT_EQ(p.plan->params.grammar_after, "") << extra;
  }
  EXPECT_EQ(structured.cache().hits(), 1);  // guided_regex and structured_outputs.regex share one
  const PlanOrError text = chat(R"({"response_format":{"type":"text"}})");
  ASSERT_TRUE(text.plan);
  EXPECT_FALSE(text.plan->params.grammar);
  // Thinking: the grammar starts after </think>; a named tool is one call.
  const PlanOrError thinking = chat(R"({"response_format":{"type":"json_object"},"chat_template_kwargs":{"thinking":true}})");
  ASSERT_TRUE(thinking.plan);
  EXPECT_EQ(thinking.plan->params.grammar_after, "</think>");
  const PlanOrError named = chat(R"({"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}],
                                     "tool_choice":{"type":"function","function":{"name":"f"}}})");
  ASSERT_TRUE(named.plan) << named.error.message;
  ASSERT_TRUE(named.plan->params.grammar);
  EXPECT_TRUE(named.plan->parse_tools);
  // Errors name the field and the construct.
  EXPECT_NE(error(R"({"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string","not":{}}}}})")
                .find("response_format: response_format: JSON schema at #: the keyword 'not' is not supported"),
            std::string::npos);
  EXPECT_NE(error(R"({"guided_regex":"(a)\\1"})").find("guided_regex: guided_regex: "), std::string::npos);
  EXPECT_NE(error(R"({"guided_regex":"(a)\\1"})").find("backreference"), std::string::npos);
  EXPECT_NE(error(R"({"guided_json":{"type":"object"},"guided_regex":"a"})").find("guided_json and guided_regex both constrain"),
            std::string::npos);
  EXPECT_NE(error(R"({"structured_outputs":{"structural_tag":"x"}})").find("structured_outputs.structural_tag is not supported"),
            std::string::npos);
  EXPECT_NE(error(R"({"guided_grammar":"root ::= root \"a\" | \"b\""})").find("left-recursive"), std::string::npos);
  EXPECT_NE(error(R"({"tools":[{"type":"function","function":{"name":"f","parameters":{"anyOf":[{"type":"object"}]}}}],"tool_choice":"required"})")
                .find("tools[0] (f): parameters with 'anyOf' at the top are not supported"),
            std::string::npos);
  // Without a compiler the request is refused, not run unconstrained.
  m.structured = nullptr;
  EXPECT_NE(error(R"({"guided_choice":["a"]})").find("not available"), std::string::npos);
}

}  // namespace
}  // namespace dsv4
