// Configurations the reference runs, run here: the released DeepSeek-V4-Pro
// layer shapes (few layers and experts) and the corner cases config.json
// validation used to reject, each written by dsv4 mkmodel and checked by
// dsv4 verify --self-check (whole-prompt prefill against chunked and
// token-by-token prefill, then greedy decoding, bit for bit) and served by
// dsv4 run on the paged cache.
#include <gtest/gtest.h>

#include <string>

#include "temp_dir.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using testing::run_dsv4;

void expect_self_check_and_run(const std::string& mkmodel_args, const std::string& what) {
  const testing::TempDir tmp;
  const std::string dir = tmp.file("model");
  const auto made = run_dsv4("mkmodel --out " + dir + " " + mkmodel_args);
  ASSERT_EQ(made.code, 0) << what << "\n" << made.output;
  const auto check = run_dsv4("verify --self-check --model " + dir);
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
// formats, with 3 layers, 6 routed experts and a small vocabulary.
TEST(ReleasedShapes, ProShapedCheckpointPassesTheSelfCheck) {
  expect_self_check_and_run(
      R"(--weights fp8 --config '{"vocab_size": 1024, "hidden_size": 7168, "moe_intermediate_size": 3072,)"
      R"( "num_hidden_layers": 3, "num_hash_layers": 2, "num_nextn_predict_layers": 1, "num_attention_heads": 128,)"
      R"( "n_routed_experts": 6, "num_experts_per_tok": 6, "routed_scaling_factor": 2.5, "q_lora_rank": 1536,)"
      R"( "head_dim": 512, "qk_rope_head_dim": 64, "o_groups": 16, "o_lora_rank": 1024, "sliding_window": 128,)"
      R"( "compress_ratios": [128, 128, 4, 0], "index_n_heads": 64, "index_head_dim": 128, "index_topk": 1024,)"
      R"( "hc_mult": 4, "max_position_embeddings": 4096}')",
      "Pro shapes");
}

}  // namespace
}  // namespace dsv4
