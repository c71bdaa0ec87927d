// Configurations the reference runs, run here: the released DeepSeek-V4
// Flash and Pro layer shapes (few layers and experts) and the corner cases
// config.json validation used to reject, each written by dsv4 mkmodel and
// checked by dsv4 verify --self-check (whole-prompt prefill against chunked
// and token-by-token prefill, then greedy decoding, bit for bit) and served
// by dsv4 run on the paged cache; at the Flash shapes also the parallel
// layouts, the memory a load takes and the capacity planner.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>

#include "checkpoint/config_json.h"
#include "checkpoint/model_loader.h"
#include "checkpoint/v41_loader.h"
#include "runtime/local_executor.h"
#include "temp_dir.h"
#include "test_util.h"
#include "tools/capacity_plan.h"

namespace dsv4 {
namespace {

using testing::run_dsv4;

// self_check_args: e.g. one chunking where three would take minutes.
void expect_self_check_and_run(const std::string& mkmodel_args, const std::string& what,
                               const std::string& self_check_args = "") {
  const testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const auto made = run_dsv4("mkmodel --out " + dir + " " + mkmodel_args);
  ASSERT_EQ(made.code, 0) << what << "\n" << made.output;
  const auto check = run_dsv4("verify --self-check --model " + dir + self_check_args);
  EXPECT_EQ(check.code, 0) << what << "\n" << check.output;
  EXPECT_NE(check.output.find("PASS"), std::string::npos) << what << "\n" << check.output;
  const auto run = run_dsv4("run --model " + dir + " --max-tokens 8 --seed 3 --prompt " +
                            "'a prompt long enough to cross the sliding window and a few compressed rows'");
  EXPECT_EQ(run.code, 0) << what << "\n" << run.output;
  EXPECT_NE(run.output.find("1 requests:"), std::string::npos) << what << "\n" << run.output;
}

TEST(ReferenceConfigs, CornerCasesTheReferenceRunsLoadAndRun) {
  // The indexer head all RoPE dims (its non-RoPE part empty).
  expect_self_check_and_run(R"(--config '{"index_head_dim": 64}')", "index_head_dim = qk_rope_head_dim");
  // The KV head all RoPE dims too (no FP8 dims in a KV row).
  expect_self_check_and_run(R"(--config '{"head_dim": 64, "index_head_dim": 64}')", "head_dim = qk_rope_head_dim");
  // Ratio 1, no indexer top-k, one Sinkhorn normalization, every layer
  // (the MTP block too) hash-routed, a ratio list longer than the layers.
  expect_self_check_and_run(R"(--config '{"compress_ratios": [0, 4, 1, 0, 0, 128], "index_topk": 0,)"
                            R"( "hc_sinkhorn_iters": 0, "num_hash_layers": 9}')",
                            "ratio 1, index_topk 0, one Sinkhorn step, hash MTP");
}

// DeepSeek-V4-Pro's attention and expert shapes (hidden 7168, 128 heads of
// 512 in 16 output groups, q LoRA 1536, experts 3072 wide, top-6, index 64
// heads of 128 with top-1024, ratios starting 128, 128) in the released
// formats, with 3 layers, 6 routed experts and a small vocabulary; prefill
// in chunks of 7 against the whole prompt (token by token costs minutes at
// these shapes; the greedy steps run single tokens).
TEST(ReleasedShapes, ProShapedCheckpointPassesTheSelfCheck) {
  expect_self_check_and_run(
      R"(--weights fp8 --config '{"vocab_size": 1024, "hidden_size": 7168, "moe_intermediate_size": 3072,)"
      R"( "num_hidden_layers": 3, "num_hash_layers": 2, "num_nextn_predict_layers": 1, "num_attention_heads": 128,)"
      R"( "n_routed_experts": 6, "num_experts_per_tok": 6, "routed_scaling_factor": 2.5, "q_lora_rank": 1536,)"
      R"( "head_dim": 512, "qk_rope_head_dim": 64, "o_groups": 16, "o_lora_rank": 1024, "sliding_window": 128,)"
      R"( "compress_ratios": [128, 128, 4, 0], "index_n_heads": 64, "index_head_dim": 128, "index_topk": 1024,)"
      R"( "hc_mult": 4, "max_position_embeddings": 4096}')",
      "Pro shapes", " --chunk 7");
}

// DeepSeek-V4-Flash's layers as released (hidden 4096, 64 heads of 512, q
// LoRA 1024, 8 output groups, experts 2048 wide, index 64 heads of 128 with
// top-512, FP8 attention, FP4 experts, BF16 embedding and head): the first
// four (two sliding-window, ratio 4 with the indexer, ratio 128) and the MTP
// layer, 8 routed experts, a 4096-token vocabulary. The longest prompt
// (2304 tokens: 576 compressed rows) makes the indexer's top-512 choose,
// the shortest decodes across the 128-token window; the tensor- and
// expert-parallel layouts print what one rank prints on a prompt past the
// top-k too.
TEST(ReleasedShapes, FlashShapedCheckpointPassesTheSelfCheckAndEveryLayout) {
  const testing::TempDir tmp;
  const std::string dir = tmp.file("flash");
  const auto made = run_dsv4("mkmodel --out " + dir + " --preset flash --layers 4 --experts 8 --vocab 4096");
  ASSERT_EQ(made.code, 0) << made.output;
  ASSERT_NE(made.output.find("hidden 4096, 64 heads x 512, 8 experts top-6"), std::string::npos) << made.output;
  const auto check = run_dsv4("verify --self-check --model " + dir + " --prompt-len 2304 --chunk 256");
  EXPECT_EQ(check.code, 0) << check.output;
  EXPECT_NE(check.output.find("prompts of 2304, 1382 and 122 tokens"), std::string::npos) << check.output;
  EXPECT_NE(check.output.find("PASS"), std::string::npos) << check.output;

  std::string prompt;
  for (int i = 0; prompt.size() < 2200; ++i) prompt += "w" + std::to_string(i * 7919 % 1000) + " ";
  const std::string args = "run --model " + dir + " --numerics exact --prompt '" + prompt +
                           "' --prompt 'short' --max-tokens 6 --temperature 0 --ignore-eos --max-num-seqs 4 "
                           "--kv-cache-memory 1G";
  const auto one = run_dsv4(args);
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_NE(testing::generated_texts(one.output).find("[1] "), std::string::npos) << one.output;
  // The long prompt has more than 512 compressed rows at ratio 4: the
  // indexer's top-512 chooses.
  std::smatch tokens;
  ASSERT_TRUE(std::regex_search(one.output, tokens, std::regex(R"(2 requests: (\d+) prompt)"))) << one.output;
  EXPECT_GT(std::stoi(tokens[1]), 512 * 4 + 16) << one.output;
  for (const char* layout : {"--tp 2", "--dp 2 --ep 2"}) {
    const auto many = run_dsv4(args + " " + layout);
    ASSERT_EQ(many.code, 0) << layout << "\n" << many.output;
    EXPECT_EQ(testing::generated_texts(many.output), testing::generated_texts(one.output)) << layout;
  }
}

// dsv4 run on the checkpoint in dir (run_args after the prompt) loads more
// than min_gb of weights, and the process's peak RSS grows by at most the
// resident weights and 512 MiB.
void expect_load_within_weights(const std::string& dir, const std::string& run_args, double min_gb) {
  const auto run = run_dsv4("run --model " + dir + " --prompt hi " + run_args);
  ASSERT_EQ(run.code, 0) << run.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.output, m,
                                std::regex(R"(([0-9.]+) GB resident, peak RSS ([0-9.]+) GB \(([0-9.]+) GB before\))")))
      << run.output;
  const double resident = std::stod(m[1]), peak = std::stod(m[2]), before = std::stod(m[3]);
  EXPECT_GT(resident, min_gb) << run.output;
  EXPECT_LE(peak - before, resident + 512.0 * 1048576 / 1e9) << run.output;
}

// Loading a Flash-shaped checkpoint holds at most its weights and 512 MiB
// more at the peak (the file is read in bounded pieces straight into the
// packed panels), and dsv4 plan's numbers from config.json alone are the
// engine's: resident weights per rank, KV bytes per token, the tokens a
// budget holds, the bytes a decode token reads.
TEST(ReleasedShapes, FlashShapedLoadStaysWithinItsWeightsAndThePlannerAgrees) {
  const testing::TempDir tmp;
  const std::string dir = tmp.file("flash");
  const auto made = run_dsv4("mkmodel --out " + dir + " --preset flash --layers 3 --experts 8 --vocab 2048");
  ASSERT_EQ(made.code, 0) << made.output;

  expect_load_within_weights(dir, "--max-tokens 1 --max-num-seqs 4 --kv-cache-memory 512M", 0.9);

  auto config = load_model_config(dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status().message();
  auto within = [](double got, double want) { return std::abs(got - want) <= 0.01 * std::abs(want); };
  for (const TopologyOptions& layout : {TopologyOptions{1, 1, 0}, TopologyOptions{2, 1, 2}}) {
    SCOPED_TRACE("tp " + std::to_string(layout.tp) + " ep " + std::to_string(layout.ep));
    ParallelOptions parallel;
    parallel.topology = layout;
    KvCacheOptions cache;
    cache.memory_bytes = int64_t{1} << 30;
    cache.max_num_seqs = 8;
    cache.max_num_batched_tokens = 512;
    auto engine = LocalExecutor::create(dir, ModelOptions{}, parallel, cache);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    PlanOptions o;
    o.topology = layout;
    o.cache = cache;
    o.kv_cache_bytes = cache.memory_bytes;
    o.max_model_len = 8192;
    auto plan = plan_capacity(*config, o);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    const ModelWeights& w = (*engine)->model(0).weights();
    EXPECT_TRUE(within(plan->rank_weight_bytes, w.resident_bytes())) << plan->rank_weight_bytes << " vs " << w.resident_bytes();
    const KvCacheManager& kv = *(*engine)->cache(0);
    EXPECT_TRUE(within(plan->kv.bytes, kv.bytes())) << plan->kv.bytes << " vs " << kv.bytes();
    EXPECT_TRUE(within(plan->tokens_per_group, kv.token_capacity())) << plan->tokens_per_group << " vs " << kv.token_capacity();
    EXPECT_TRUE(within(plan->kv_bytes_per_token, kv.bytes_per_token(8192)));
    if (layout.tp == 1) {  // what dsv4 bench's roofline divides the bandwidth by
      const ModelConfig& c = *config;
      double decode = 0;
      w.for_each_linear([&](const Linear& l, LinearKind kind) {
        if (kind == LinearKind::kMain || kind == LinearKind::kHead) decode += l.resident_bytes();
        if (kind == LinearKind::kRoutedExpert)
          decode += static_cast<double>(l.resident_bytes()) * c.n_activated_experts / c.n_routed_experts;
      });
      EXPECT_TRUE(within(plan->decode_bytes_per_token, decode)) << plan->decode_bytes_per_token << " vs " << decode;
    }
  }
}

// DeepSeek-V4.1-Flash's layers as released (hidden 5120, 64 heads of 512, q
// LoRA 1280, experts 2304 wide, index 32 heads of 128, Engram 8 heads of
// 256, the DSpark stages), four layers of its roles (the ratio-2 and
// ratio-1 KV sources, the Engram layers), 6 experts, an 8192-token
// vocabulary and Engram tables of 24 columns of about 4096 rows, as dsv4
// mkmodel writes it (2.4 GB): the load holds at most its resident weights
// and 512 MiB more, dsv4 plan counts what the loader holds, and dsv4 run
// serves it. (Its self-check takes minutes in exact numerics at these
// shapes; SyntheticV41.SelfCheckPassesOnTheShrunkPreset runs it on the
// preset's roles at small widths.)
TEST(ReleasedShapes, V41FlashShapedLoadStaysWithinItsWeightsAndThePlannerAgrees) {
  const testing::TempDir tmp;
  const std::string dir = tmp.file("v41");
  const auto made = run_dsv4("mkmodel --out " + dir + " --preset v41-flash --layers 4 --experts 6 --vocab 8192 "
                             "--engram-vocab 4096");
  ASSERT_EQ(made.code, 0) << made.output;
  ASSERT_NE(made.output.find("DeepSeek-V4.1"), std::string::npos) << made.output;
  auto config = load_any_model_config(dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->dim, 5120);
  EXPECT_EQ(config->n_heads, 64);
  EXPECT_EQ(config->moe_inter_dim, 2304);
  // Released layers 1 (Engram), 2 (ratio-2 KV source), 14 (Engram, KV
  // source) and 20 (ratio-1 KV source, the candidate source), renumbered.
  EXPECT_EQ(config->compress_ratios, (std::vector<int>{0, 2, 2, 1, 0, 0, 0}));
  EXPECT_EQ(config->shared.kv_source_layers, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(config->shared.candidate_source_layer, 3);
  EXPECT_EQ(config->engram.layer_ids, (std::vector<int>{0, 2}));
  EXPECT_EQ(config->dspark_target_layer_ids, (std::vector<int>{1, 2, 3}));

  expect_load_within_weights(dir, "--max-tokens 2 --kv-cache-memory 256M", 1.0);

  // Two tensor-parallel ranks at these shapes (32 heads, 8 output groups,
  // half of every split linear each) greedy-decode what one rank does.
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += " w" + std::to_string(i);
  const std::string greedy = "run --model " + dir + " --max-tokens 4 --temperature 0 --kv-cache-memory 256M --prompt '" +
                             prompt + "' --prompt 'Good day'";
  const auto one = run_dsv4(greedy);
  const auto two = run_dsv4(greedy + " --tp 2");
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_NE(two.output.find("TP2 x DP1"), std::string::npos) << two.output;
  EXPECT_NE(testing::generated_texts(one.output).find("[1] "), std::string::npos) << one.output;
  EXPECT_EQ(testing::generated_texts(two.output), testing::generated_texts(one.output));

  auto weights = load_v41_weights(dir, *config);
  ASSERT_TRUE(weights.ok()) << weights.status().message();
  PlanOptions o;
  o.max_model_len = 4096;
  o.kv_cache_bytes = int64_t{256} << 20;
  auto plan = plan_capacity(*config, o);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->rank_weight_bytes, (*weights)->resident_bytes());
  EXPECT_EQ(plan->engram_bytes, (*weights)->engram_bytes());
}

}  // namespace
}  // namespace dsv4
