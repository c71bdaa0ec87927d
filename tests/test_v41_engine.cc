// DeepSeek-V4.1 served by the engine (paged caches, the scheduler's
// chunking and batching, DSpark speculative decoding) generates exactly the
// official reference's greedy tokens on the V4.1 golden cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "checkpoint/v41_loader.h"
#include "golden_v41_case.h"
#include "checkpoint/config_json.h"
#include "runtime/engine.h"
#include "runtime/local_executor.h"
#include "http/http_client.h"
#include "server_process.h"
#include "test_util.h"

namespace dsv4 {
namespace {

struct Golden {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> tokens;  // the reference's greedy continuation of each
};

// The tokens the reference chose: each decode step's input, then the last
// step's argmax.
Golden golden(const std::string& name, int64_t vocab) {
  Golden g;
  auto file = SafetensorsFile::open(golden_v41_dir(name) + "/golden.safetensors");
  EXPECT_TRUE(file.ok());
  if (!file.ok()) return g;
  const SafetensorsFile& f = **file;
  const std::vector<int64_t> shape = f.find("prompt_ids")->shape;
  const int64_t B = shape[0], S = shape[1], T = f.find("decode_ids")->shape[0];
  const auto prompt = read_tensor<int64_t>(f, "prompt_ids");
  const auto ids = read_tensor<int64_t>(f, "decode_ids");
  const auto logits = read_tensor<float>(f, "decode_logits");
  for (int64_t b = 0; b < B; ++b) {
    g.prompts.emplace_back(prompt.begin() + b * S, prompt.begin() + (b + 1) * S);
    std::vector<int32_t> out;
    for (int64_t t = 0; t < T; ++t) out.push_back(static_cast<int32_t>(ids[t * B + b]));
    const float* last = &logits[((T - 1) * B + b) * vocab];
    out.push_back(static_cast<int32_t>(std::max_element(last, last + vocab) - last));
    g.tokens.push_back(out);
  }
  return g;
}

// Greedy continuations of each prompt, of max_tokens[i] tokens.
std::vector<std::vector<int32_t>> serve(StatusOr<std::unique_ptr<Engine>> engine,
                                        const std::vector<std::vector<int32_t>>& prompts,
                                        const std::vector<int64_t>& max_tokens) {
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  std::vector<std::vector<int32_t>> out(prompts.size());
  if (!engine.ok()) return out;
  std::map<int64_t, size_t> which;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = max_tokens[i];
    p.ignore_eos = true;
    auto id = (*engine)->add_request(prompts[i], p);
    EXPECT_TRUE(id.ok()) << id.status().message();
    if (id.ok()) which[*id] = i;
  }
  for (int step = 0; (*engine)->has_unfinished() && step < 10000; ++step)
    for (const RequestOutput& o : (*engine)->step()) {
      EXPECT_TRUE(o.error.empty()) << o.error;
      auto& tokens = out[which[o.id]];
      tokens.insert(tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
    }
  EXPECT_EQ((*engine)->cache().pages_in_use(), 0);
  return out;
}

// The golden models' 128 positions; a step budget of batched_tokens
// (chunks the prefill), DSpark drafting `speculative` tokens a step.
EngineOptions golden_engine(int64_t batched_tokens, int speculative) {
  EngineOptions options;
  options.scheduler.max_num_batched_tokens = batched_tokens;
  options.scheduler.max_model_len = 128;
  if (speculative) {
    options.scheduler.num_speculative_tokens = speculative;
    options.scheduler.drafter = SchedulerOptions::Drafter::kDSpark;
  }
  return options;
}

struct Mode {
  const char* name;
  int64_t batched_tokens;  // the step's token budget: chunks the prefill
  int speculative;         // DSpark drafts per step
};

class V41Engine : public ::testing::TestWithParam<std::tuple<std::string, Mode>> {};

TEST_P(V41Engine, GeneratesTheReferencesGreedyTokens) {
  const auto& [name, mode] = GetParam();
  auto model = load_deepseek_v41(golden_v41_dir(name));
  ASSERT_TRUE(model.ok()) << model.status().message();
  const Golden g = golden(name, (*model)->config().vocab_size);
  ASSERT_EQ(g.prompts.size(), 2u);
  const EngineOptions options = golden_engine(mode.batched_tokens, mode.speculative);
  const std::vector<int64_t> lengths(g.prompts.size(), static_cast<int64_t>(g.tokens[0].size()));
  const auto tokens = serve(Engine::create(model->get(), options), g.prompts, lengths);
  for (size_t b = 0; b < g.prompts.size(); ++b) EXPECT_EQ(tokens[b], g.tokens[b]) << "prompt " << b;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, V41Engine,
    ::testing::Combine(::testing::Values("v41-tiny", "v41-fp8"),
                       ::testing::Values(Mode{"Packed", 2048, 0}, Mode{"Chunks7", 7, 0}, Mode{"Chunks64", 64, 0},
                                         Mode{"DSpark3", 2048, 3})),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == "v41-tiny" ? "Tiny_" : "Fp8_") + std::get<1>(info.param).name;
    });

// Tensor-, data- and expert-parallel ranks (threads here): each
// data-parallel group serves its own requests, its tensor-parallel ranks
// splitting the heads and the dense linears' features, the routed experts
// (the DSpark stages' too) split over the expert group, whose ranks run
// every layer together, an empty batch or a chunk the model cuts in two
// (decode rows after a prompt, draft verification) included.
struct Layout {
  const char* name;
  int tp, dp, ep;
  int64_t batched_tokens;
  int speculative;
  bool flashcomm = false;  // FlashComm1 in every prefill forward
};

class V41Layouts : public ::testing::TestWithParam<std::tuple<std::string, Layout>> {};

TEST_P(V41Layouts, GenerateTheReferencesGreedyTokens) {
  const auto& [name, layout] = GetParam();
  const std::string dir = golden_v41_dir(name);
  auto config = load_any_model_config(dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status().message();
  const Golden g = golden(name, config->vocab_size);
  const EngineOptions options = golden_engine(layout.batched_tokens, layout.speculative);
  auto cache = Engine::cache_options(*config, options);
  ASSERT_TRUE(cache.ok()) << cache.status().message();
  ParallelOptions p;
  p.topology.tp = layout.tp;
  p.topology.dp = layout.dp;
  p.topology.ep = layout.ep;
  p.flashcomm = {layout.flashcomm, 1};
  auto exec = LocalExecutor::create(dir, {}, p, *cache);
  ASSERT_TRUE(exec.ok()) << exec.status().message();
  ASSERT_EQ((*exec)->num_groups(), layout.dp);
  // A rank holds its share of the weights only.
  auto whole = load_deepseek_v41(dir);
  ASSERT_TRUE(whole.ok());
  EXPECT_LT((*exec)->resident_bytes(0), (*whole)->weights().resident_bytes());
  // The third request stops after 3 tokens: its group then steps with
  // nothing to run while the other still decodes (and verifies drafts).
  std::vector<std::vector<int32_t>> prompts = g.prompts, want = g.tokens;
  prompts.push_back(g.prompts[1]);
  want.emplace_back(g.tokens[1].begin(), g.tokens[1].begin() + 3);
  std::vector<int64_t> lengths;
  for (const auto& w : want) lengths.push_back(static_cast<int64_t>(w.size()));
  const auto tokens = serve(Engine::create(std::move(*exec), options.scheduler), prompts, lengths);
  for (size_t b = 0; b < prompts.size(); ++b) EXPECT_EQ(tokens[b], want[b]) << "prompt " << b;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, V41Layouts,
    ::testing::Combine(::testing::Values("v41-tiny", "v41-fp8"),
                       ::testing::Values(Layout{"DP2xEP2", 1, 2, 2, 2048, 0}, Layout{"DP4xEP4Chunks7", 1, 4, 4, 7, 0},
                                         Layout{"DP2xEP2DSpark3", 1, 2, 2, 2048, 3},
                                         Layout{"TP2xDP2xEP4Chunks7FlashComm1", 2, 2, 4, 7, 0, true},
                                         Layout{"TP4DSpark3", 4, 1, 4, 2048, 3})),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == "v41-tiny" ? "Tiny_" : "Fp8_") + std::get<1>(info.param).name;
    });

// A request preempted on one data-parallel group recomputes its prompt and
// tokens in a chunk the model cuts in two (its decode rows read index keys
// later layers write), while the other group decodes one row: the expert
// group's ranks all run in two, and both requests go on with the
// reference's tokens.
TEST(V41Layouts, APreemptionOnOneGroupKeepsTheExpertGroupInStep) {
  const std::string dir = golden_v41_dir("v41-fp8");
  auto config = load_any_model_config(dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status().message();
  const Golden g = golden("v41-fp8", config->vocab_size);
  EngineOptions options;
  options.scheduler.max_model_len = 128;
  auto cache = Engine::cache_options(*config, options);
  ASSERT_TRUE(cache.ok()) << cache.status().message();
  ParallelOptions p;
  p.topology.dp = 2;
  auto exec = LocalExecutor::create(dir, {}, p, *cache);
  ASSERT_TRUE(exec.ok()) << exec.status().message();
  auto engine = Engine::create(std::move(*exec), options.scheduler);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  std::map<int64_t, size_t> which;
  for (size_t i = 0; i < 2; ++i) {
    SamplingParams sp;
    sp.temperature = 0.0f;
    sp.max_tokens = static_cast<int64_t>(g.tokens[i].size());
    sp.ignore_eos = true;
    auto id = (*engine)->add_request(g.prompts[i], sp);
    ASSERT_TRUE(id.ok()) << id.status().message();
    which[*id] = i;
  }
  std::vector<std::vector<int32_t>> tokens(2);
  bool preempted = false;
  for (int step = 0; (*engine)->has_unfinished() && step < 1000; ++step)
    for (const RequestOutput& o : (*engine)->step()) {
      EXPECT_TRUE(o.error.empty()) << o.error;
      auto& t = tokens[which[o.id]];
      t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
      if (!preempted && which[o.id] == 0 && t.size() >= 5 && !o.finished) preempted = (*engine)->preempt(o.id);
    }
  EXPECT_TRUE(preempted);
  for (size_t b = 0; b < 2; ++b) EXPECT_EQ(tokens[b], g.tokens[b]) << "prompt " << b;
}

// Preempted mid-decode, a request recomputes its prompt and tokens (the
// prompt in its one-shot layout) and goes on with the same tokens.
TEST(V41Engine, APreemptedRequestGoesOnWithTheSameTokens) {
  auto model = load_deepseek_v41(golden_v41_dir("v41-fp8"));
  ASSERT_TRUE(model.ok()) << model.status().message();
  const Golden g = golden("v41-fp8", (*model)->config().vocab_size);
  EngineOptions options;
  options.scheduler.max_model_len = 128;
  auto engine = Engine::create(model->get(), options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = static_cast<int64_t>(g.tokens[0].size());
  p.ignore_eos = true;
  auto id = (*engine)->add_request(g.prompts[0], p);
  ASSERT_TRUE(id.ok());
  std::vector<int32_t> tokens;
  bool preempted = false;
  for (int step = 0; (*engine)->has_unfinished() && step < 1000; ++step)
    for (const RequestOutput& o : (*engine)->step()) {
      tokens.insert(tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      if (!preempted && tokens.size() >= 5 && !o.finished) preempted = (*engine)->preempt(o.id);
    }
  EXPECT_TRUE(preempted);
  EXPECT_EQ((*engine)->stats().preemptions, 1);
  EXPECT_EQ(tokens, g.tokens[0]);
}

// The CLI loads a V4.1 checkpoint by its config, on data- and
// tensor-parallel ranks too, and refuses by name a split its shapes do not
// allow.
TEST(V41Engine, RunServesAV41CheckpointOnParallelRanks) {
  const std::string dir = golden_v41_dir("v41-fp8");
  auto run = testing::run_dsv4("run --model " + dir + " --prompt 'Hello there' --max-tokens 4 --temperature 0 --numerics exact");
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("numerics exact"), std::string::npos) << run.output;
  auto fast = testing::run_dsv4("run --model " + dir + " --prompt 'Hello there' --max-tokens 4 --temperature 0");
  EXPECT_EQ(fast.code, 0) << fast.output;
  EXPECT_NE(fast.output.find("fast numerics"), std::string::npos) << fast.output;
  EXPECT_NE(fast.output.find("numerics fast"), std::string::npos) << "fast by default\n" << fast.output;
  EXPECT_NE(run.output.find("4 generated tokens"), std::string::npos) << run.output;
  auto dp = testing::run_dsv4("run --model " + dir + " --prompt 'Hello there' --max-tokens 4 --temperature 0 --dp 2");
  EXPECT_EQ(dp.code, 0) << dp.output;
  EXPECT_NE(dp.output.find("TP1 x DP2, EP2"), std::string::npos) << dp.output;
  const std::string two = "run --model " + dir + " --prompt 'Hello there' --prompt 'Good day' --max-tokens 6 --temperature 0";
  auto one_rank = testing::run_dsv4(two);
  auto tp = testing::run_dsv4(two + " --tp 2");
  EXPECT_EQ(tp.code, 0) << tp.output;
  EXPECT_NE(tp.output.find("TP2 x DP1, EP2"), std::string::npos) << tp.output;
  EXPECT_NE(testing::generated_texts(one_rank.output).find("[1] "), std::string::npos) << one_rank.output;
  EXPECT_EQ(testing::generated_texts(tp.output), testing::generated_texts(one_rank.output));
  auto odd = testing::run_dsv4("run --model " + dir + " --prompt hi --tp 8 --ep 2");
  EXPECT_EQ(odd.code, 2) << odd.output;
  EXPECT_NE(odd.output.find("--tp 8 must divide the 4 attention heads"), std::string::npos) << odd.output;
}

// dsv4 serve on a V4.1 checkpoint renders V4.1's chat format (its tool
// calls, which the golden model's 128 positions leave no room for, are
// covered by ChatEncodingV41, ChoiceText and ToolCallGrammar); the effort
// takes a 1-100 budget and refuses what V4.1 does not know; an image part
// is a 400 naming it and what is missing (the vision tower), in the chat,
// Responses and Messages APIs.
TEST(V41Engine, ServeSpeaksV41sChatFormat) {
  testing::ServerProcess server({"--model", golden_v41_dir("v41-fp8"), "--kv-cache-memory", "64M"});
  ASSERT_GT(server.port(), 0) << server.log();
  HttpClient cli("127.0.0.1", server.port());
  auto tokens = cli.post("/tokenize", R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}],
      "reasoning_effort": 30})", "application/json");
  ASSERT_TRUE(tokens);
  ASSERT_EQ(tokens->status, 200) << tokens->body;
  const auto ids = nlohmann::json::parse(tokens->body)["tokens"];
  auto text = cli.post("/detokenize", nlohmann::json{{"tokens", ids}}.dump(), "application/json");
  ASSERT_TRUE(text);
  ASSERT_EQ(text->status, 200) << text->body;
  EXPECT_EQ(nlohmann::json::parse(text->body)["prompt"],
            "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 30 (range 1-100, the higher the value, the more "
            "thorough the reasoning)\n\nS<｜User｜>hi<｜Assistant｜><think>");

  auto budget = cli.post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}],
      "reasoning_effort": 30, "max_tokens": 2})", "application/json");
  ASSERT_TRUE(budget);
  EXPECT_EQ(budget->status, 200) << budget->body;
  auto medium = cli.post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}],
      "reasoning_effort": "medium", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(medium);
  EXPECT_EQ(medium->status, 400) << medium->body;
  EXPECT_NE(medium->body.find("low, high, xhigh, max or a number from 1 to 100"), std::string::npos) << medium->body;
  auto image = cli.post("/v1/chat/completions", R"({"messages": [{"role": "user", "content":
      [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}], "max_tokens": 2})",
                        "application/json");
  ASSERT_TRUE(image);
  EXPECT_EQ(image->status, 400) << image->body;
  EXPECT_NE(image->body.find("'image_url' part"), std::string::npos) << image->body;
  // Every API names what is missing: the vision tower.
  auto responses = cli.post("/v1/responses", R"({"input": [{"role": "user", "content":
      [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}], "max_output_tokens": 2})",
                            "application/json");
  auto messages = cli.post("/v1/messages", R"({"max_tokens": 2, "messages": [{"role": "user", "content":
      [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]})",
                           "application/json");
  for (const auto& r : {image, responses, messages}) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(r->body.find("vision tower (image inputs) is not loaded by this build"), std::string::npos) << r->body;
  }
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
}  // namespace dsv4
