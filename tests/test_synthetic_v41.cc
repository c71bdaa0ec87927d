// dsv4 mkmodel --preset v41-flash: the layer roles a shrunk model keeps,
// its tokenizer (what Engram's token map folds) and a checkpoint the
// loader, the forward and the planner take as written.
#include <gtest/gtest.h>

#include "checkpoint/config_json.h"
#include "checkpoint/v41_loader.h"
#include "golden_v41_case.h"
#include "runtime/engine.h"
#include "runtime/local_executor.h"
#include "temp_dir.h"
#include "test_util.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/engram_token_map.h"
#include "tools/capacity_plan.h"
#include "tools/synthetic_v41.h"

namespace dsv4 {
namespace {

ModelConfig parsed(const nlohmann::json& j) {
  auto c = parse_v41_model_config(j.dump(), "test");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : ModelConfig{};
}

TEST(SyntheticV41, ShrunkLayersKeepEveryRoleFirst) {
  PresetCounts six;
  six.layers = 6;
  auto j = synthetic_v41_config("", six);
  ASSERT_TRUE(j.ok()) << j.status().message();
  // Released layers 1, 2, 3, 14, 20, 21: the ratio-2 and ratio-1 first KV
  // sources (20 the candidate source), the Engram layers, and a layer
  // sharing each first source's caches.
  const ModelConfig c = parsed(*j);
  EXPECT_EQ(c.n_layers, 6);
  EXPECT_EQ(c.compress_ratios, (std::vector<int>{0, 2, 2, 2, 1, 1, 0, 0, 0}));
  EXPECT_EQ(c.shared.kv_source_layers, (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(c.shared.index_source_layers, (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(c.shared.candidate_source_layer, 4);
  EXPECT_EQ(c.engram.layer_ids, (std::vector<int>{0, 3}));
  EXPECT_EQ(c.dspark_target_layer_ids, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(c.dspark_stages, 3);
  EXPECT_EQ(c.dim, 5120);

  // Seven adds the first index-only source (released 24).
  PresetCounts seven;
  seven.layers = 7;
  const ModelConfig c7 = parsed(*synthetic_v41_config("", seven));
  EXPECT_EQ(c7.shared.index_source_layers, (std::vector<int>{1, 3, 4, 6}));
  EXPECT_EQ(c7.shared.kv_source_layers, (std::vector<int>{1, 3, 4}));

  // One layer: the ratio-2 source alone, no candidate source, no Engram.
  PresetCounts one;
  one.layers = 1;
  const ModelConfig c1 = parsed(*synthetic_v41_config("", one));
  EXPECT_EQ(c1.shared.kv_source_layers, (std::vector<int>{0}));
  EXPECT_EQ(c1.shared.candidate_source_layer, -1);
  EXPECT_FALSE(c1.engram.enabled());
}

TEST(SyntheticV41, CountsAreCheckedAndNamed) {
  PresetCounts more;
  more.layers = 41;
  auto j = synthetic_v41_config("", more);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("can only shrink the preset's 40 layers"), std::string::npos) << j.status().message();
  PresetCounts tiny_vocab;
  tiny_vocab.vocab = 100;
  EXPECT_FALSE(synthetic_v41_config("", tiny_vocab).ok());
  PresetCounts experts;
  experts.experts = 2;
  const ModelConfig c = parsed(*synthetic_v41_config("", experts));
  EXPECT_EQ(c.n_routed_experts, 2);
  EXPECT_EQ(c.n_activated_experts, 2);
  EXPECT_EQ(c.dspark_n_routed_experts, 2);
  EXPECT_EQ(c.dspark_n_activated_experts, 2);
  EXPECT_FALSE(synthetic_v41_config("[1]", {}).ok());
}

TEST(SyntheticV41, TokenizerHasTheVocabularyAndWhatEngramFolds) {
  auto tok = BpeTokenizer::from_json_text(synthetic_v41_tokenizer_json(1024), "", "synthetic");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const BpeTokenizer& t = **tok;
  EXPECT_EQ(t.vocab_size(), 1024);
  EXPECT_EQ(t.token_string(0), chat_tokens::kBos);
  EXPECT_EQ(t.token_string(1), chat_tokens::kEos);
  for (const char* special : {chat_tokens::kUser, chat_tokens::kAssistant, chat_tokens::kThink}) {
    const int32_t id = t.token_id(special);
    ASSERT_GE(id, 0) << special;
    EXPECT_TRUE(t.is_special(id)) << special;
  }
  const std::string text = "Hello, the café is naïve THE end\n\n";
  std::string back;
  const std::vector<int32_t> ids = t.encode(text);
  for (int32_t id : ids) back += t.token_bytes(id);
  EXPECT_EQ(back, text);
  EXPECT_LT(ids.size(), text.size());  // words are merged
  // Case and a leading space fold together; the map is smaller than the vocabulary.
  const EngramTokenMap map = build_engram_token_map(t);
  const int32_t the = t.token_id("the"), The = t.token_id("ĠThe");
  ASSERT_GE(the, 0);
  ASSERT_GE(The, 0);
  EXPECT_EQ(map.compressed[the], map.compressed[The]);
  EXPECT_NE(map.compressed[the], map.compressed[t.token_id("of")]);
  EXPECT_LT(map.size, 1024);
}

// The preset's roles (six layers, Engram, the candidate source, DSpark) at
// small widths.
StatusOr<nlohmann::json> small_preset_config() {
  PresetCounts counts;
  counts.layers = 6;
  counts.experts = 4;
  counts.vocab = 1024;
  counts.engram_vocab = 97;
  return synthetic_v41_config(R"({"hidden_size": 128, "num_attention_heads": 4, "head_dim": 128, "q_lora_rank": 64,
      "o_lora_rank": 32, "o_groups": 2, "moe_intermediate_size": 64, "index_n_heads": 4, "sliding_window": 16,
      "engram_n_heads": 2, "engram_head_dim": 64, "dspark_markov_rank": 32, "candidate_topk_blocks": 2,
      "candidate_block_size": 4, "index_topk": 8})",
                              counts);
}

// A small model of the preset's roles (the released shapes shrunk through
// --config): what is written loads, runs and plans as written.
TEST(SyntheticV41, WrittenCheckpointLoadsRunsAndPlans) {
  auto j = small_preset_config();
  ASSERT_TRUE(j.ok()) << j.status().message();
  const testing::TempDir tmp;
  const std::string dir = tmp.file("v41");
  SyntheticOptions options;
  options.seed = 7;
  ASSERT_TRUE(write_synthetic_v41_checkpoint(*j, options, dir).ok());
  auto model = load_deepseek_v41(dir);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelConfig& c = (*model)->config();
  ASSERT_EQ(c.engram.num_embeddings.size(), 2u);
  // 3 n-gram sizes x 2 heads, each a prime of at least 97 rows.
  EXPECT_GE(c.engram.num_embeddings[0], 6 * 97);
  EXPECT_LT(c.engram.num_embeddings[0], 6 * 97 + 6 * 40);

  auto seq = (*model)->new_cache();
  ForwardBatch batch;
  const std::vector<int32_t> prompt = {0, 300, 301, 302, 303, 304, 305, 306};
  batch.add(seq.get(), prompt.data(), static_cast<int64_t>(prompt.size()), static_cast<int64_t>(prompt.size()));
  ForwardOutput out;
  ASSERT_TRUE((*model)->forward(batch, &out).ok());
  ASSERT_EQ(out.logits.size(), static_cast<size_t>(c.vocab_size));
  for (float v : out.logits) ASSERT_TRUE(std::isfinite(v));

  PlanOptions o;
  o.max_model_len = 256;
  o.kv_cache_bytes = int64_t{64} << 20;
  auto plan = plan_capacity(c, o);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->rank_weight_bytes, (*model)->weights().resident_bytes());
  EXPECT_EQ(plan->engram_bytes, (*model)->weights().engram_bytes());

  // Another seed writes other weights, the same config.
  const std::string other = tmp.file("v41-seed8");
  options.seed = 8;
  ASSERT_TRUE(write_synthetic_v41_checkpoint(*j, options, other).ok());
  EXPECT_EQ(read_text_file(dir + "/config.json"), read_text_file(other + "/config.json"));
  EXPECT_NE(read_text_file(dir + "/model-00001-of-00002.safetensors"),
            read_text_file(other + "/model-00001-of-00002.safetensors"));
}

// A prefix-cache hit on V4.1 (its shared KV and index sources, the
// candidate blocks, Engram's look-back) continues exactly as the computed
// prompt does: the same prompt served again takes its whole 128-token blocks
// from the cache and generates the same tokens as with no prefix cache, on
// one rank and on data- and expert-parallel ranks (the second request may
// land on the other group, which holds no blocks: its tokens must agree too).
TEST(SyntheticV41, PrefixCacheHitsGenerateWhatTheComputedPromptDoes) {
  auto j = small_preset_config();
  ASSERT_TRUE(j.ok()) << j.status().message();
  const testing::TempDir tmp;
  const std::string dir = tmp.file("v41");
  SyntheticOptions written;
  written.seed = 5;
  ASSERT_TRUE(write_synthetic_v41_checkpoint(*j, written, dir).ok());
  auto config = load_any_model_config(dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status().message();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 300; ++i) prompt.push_back(10 + i * 37 % 1000);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = 10;
  greedy.ignore_eos = true;
  // The prompt served `times` times, one request after the other.
  auto serve = [&](int dp, bool prefix_caching, int times, int64_t* hits) {
    EngineOptions options;
    options.scheduler.max_model_len = 512;
    options.cache.enable_prefix_caching = prefix_caching;
    auto cache = Engine::cache_options(*config, options);
    EXPECT_TRUE(cache.ok()) << cache.status().message();
    ParallelOptions p;
    p.topology.dp = dp;
    auto exec = LocalExecutor::create(dir, {}, p, *cache);
    EXPECT_TRUE(exec.ok()) << exec.status().message();
    auto engine = Engine::create(std::move(*exec), options.scheduler);
    EXPECT_TRUE(engine.ok()) << engine.status().message();
    std::vector<std::vector<int32_t>> out;
    for (int t = 0; t < times; ++t) {
      EXPECT_TRUE((*engine)->add_request(prompt, greedy).ok());
      out.emplace_back();
      for (int step = 0; (*engine)->has_unfinished() && step < 1000; ++step)
        for (const RequestOutput& o : (*engine)->step()) {
          EXPECT_TRUE(o.error.empty()) << o.error;
          out.back().insert(out.back().end(), o.new_tokens.begin(), o.new_tokens.end());
        }
    }
    *hits = (*engine)->stats().prefix_hit_tokens;
    return out;
  };
  int64_t hits = 0;
  const auto computed = serve(1, false, 1, &hits);
  ASSERT_EQ(computed[0].size(), 10u);
  EXPECT_EQ(hits, 0);
  const auto cached = serve(1, true, 2, &hits);
  EXPECT_EQ(hits, 256) << "two whole 128-token blocks of the 300-token prompt";
  EXPECT_EQ(cached[0], computed[0]);
  EXPECT_EQ(cached[1], computed[0]) << "after a prefix-cache hit";
  const auto ranks = serve(2, true, 3, &hits);
  EXPECT_GE(hits, 256);
  for (const auto& tokens : ranks) EXPECT_EQ(tokens, computed[0]) << "on DP2 x EP2";
}

// dsv4 mkmodel --preset v41-flash with the widths shrunk through --config
// (every role of the release kept: six layers, Engram, the candidate
// source, DSpark), and dsv4 verify --self-check on it: whole prompts against
// chunks of 1, 7 and 64, then greedy decoding, bit for bit.
TEST(SyntheticV41, SelfCheckPassesOnTheShrunkPreset) {
  const testing::TempDir tmp;
  const std::string dir = tmp.file("v41");
  const auto made = testing::run_dsv4(
      "mkmodel --out " + dir + " --preset v41-flash --layers 6 --experts 4 --vocab 1024 --engram-vocab 97 --seed 3 "
      R"(--config '{"hidden_size": 128, "num_attention_heads": 4, "head_dim": 128, "q_lora_rank": 64,)"
      R"( "o_lora_rank": 32, "o_groups": 2, "moe_intermediate_size": 64, "index_n_heads": 4, "sliding_window": 16,)"
      R"( "engram_n_heads": 2, "engram_head_dim": 64, "dspark_markov_rank": 32, "candidate_topk_blocks": 2,)"
      R"( "candidate_block_size": 4, "index_topk": 8}')");
  ASSERT_EQ(made.code, 0) << made.output;
  EXPECT_NE(made.output.find("candidates from layer 4"), std::string::npos) << made.output;
  const auto check = testing::run_dsv4("verify --self-check --model " + dir);
  EXPECT_EQ(check.code, 0) << check.output;
  EXPECT_NE(check.output.find("PASS"), std::string::npos) << check.output;
  EXPECT_NE(check.output.find("prefill in chunks of 1 "), std::string::npos) << check.output;
  // Fast numerics: chunks and batches change no bit either.
  const auto fast = testing::run_dsv4("verify --self-check --model " + dir + " --numerics fast");
  EXPECT_EQ(fast.code, 0) << fast.output;
  EXPECT_NE(fast.output.find("numerics fast"), std::string::npos) << fast.output;
  EXPECT_NE(fast.output.find("PASS"), std::string::npos) << fast.output;
}

}  // namespace
}  // namespace dsv4
