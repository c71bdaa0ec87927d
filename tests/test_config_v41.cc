// DeepSeek-V4.1 configs: the release's nested config.json and the
// reference's ModelArgs form read to the same model, each rule of the layer
// roles named when broken, and a V4.1 checkpoint refused by name.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/config_json.h"
#include "checkpoint/released_configs.h"

namespace dsv4 {
namespace {

using nlohmann::json;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string case_dir(const std::string& name) { return std::string(DSV4_GOLDEN_V41_DIR) + "/" + name; }

void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.summary(), b.summary());
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(a.compress_ratios, b.compress_ratios);
  EXPECT_EQ(a.shared.kv_source_layers, b.shared.kv_source_layers);
  EXPECT_EQ(a.shared.index_source_layers, b.shared.index_source_layers);
  EXPECT_EQ(a.shared.candidate_source_layer, b.shared.candidate_source_layer);
  EXPECT_EQ(a.shared.candidate_topk_blocks, b.shared.candidate_topk_blocks);
  EXPECT_EQ(a.shared.candidate_block_size, b.shared.candidate_block_size);
  EXPECT_EQ(a.engram.layer_ids, b.engram.layer_ids);
  EXPECT_EQ(a.engram.num_embeddings, b.engram.num_embeddings);
  EXPECT_EQ(a.engram.compressed_vocab_size, b.engram.compressed_vocab_size);
  EXPECT_EQ(a.engram.vocab_size, b.engram.vocab_size);
  EXPECT_EQ(a.engram.pad_id, b.engram.pad_id);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.route_scale, b.route_scale);
  EXPECT_EQ(a.rope_factor, b.rope_factor);
  EXPECT_EQ(a.original_seq_len, b.original_seq_len);
  EXPECT_EQ(a.dspark_stages, b.dspark_stages);
  EXPECT_EQ(a.dspark_n_routed_experts, b.dspark_n_routed_experts);
  EXPECT_EQ(a.dspark_n_activated_experts, b.dspark_n_activated_experts);
  EXPECT_EQ(a.dspark_target_layer_ids, b.dspark_target_layer_ids);
}

TEST(ConfigV41, TheReleaseFormAndTheReferenceFormReadTheSame) {
  for (const std::string name : {"v41-tiny", "v41-fp8"}) {
    SCOPED_TRACE(name);
    auto release = parse_v41_model_config(read_text(case_dir(name) + "/config.json"), name);
    ASSERT_TRUE(release.ok()) << release.status().message();
    const json model_args = json::parse(read_text(case_dir(name) + "/case.json"))["model_args"];
    auto reference = parse_v41_model_config(model_args.dump(), name + " model_args");
    ASSERT_TRUE(reference.ok()) << reference.status().message();
    expect_same(*release, *reference);
    EXPECT_EQ(release->weight_block, 32);
    EXPECT_EQ(release->dspark_stages, 3);
    EXPECT_EQ(release->norm_eps, 1e-20f);
  }
}

TEST(ConfigV41, TheReleasedFlashConfig) {
  auto c = parse_v41_model_config(released_config_json("v41-flash"), "DeepSeek-V4.1-Flash");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->family, ModelFamily::kV41);
  EXPECT_EQ(c->dim, 5120);
  EXPECT_EQ(c->n_layers, 40);
  EXPECT_EQ(c->compress_ratios.size(), 43u);
  EXPECT_EQ(c->compress_ratios[2], 2);
  EXPECT_EQ(c->compress_ratios[20], 1);
  EXPECT_EQ(c->shared.kv_source_layers, (std::vector<int>{2, 8, 14, 20}));
  EXPECT_EQ(c->shared.index_source_layers, (std::vector<int>{2, 8, 14, 20, 24, 28, 32, 36}));
  EXPECT_EQ(c->shared.candidate_source_layer, 20);
  EXPECT_EQ(c->shared.candidate_topk_blocks, 2048);
  EXPECT_EQ(c->shared.candidate_block_size, 8);
  EXPECT_EQ(c->engram.layer_ids, (std::vector<int>{1, 14}));
  EXPECT_EQ(c->engram.num_embeddings, (std::vector<int64_t>{384006168, 384016682}));
  EXPECT_EQ(c->engram.hash_columns(), 24);
  EXPECT_EQ(c->engram.compressed_vocab_size, 99092);
  EXPECT_EQ(c->dspark_stages, 3);
  EXPECT_EQ(c->dspark_n_routed_experts, 128);
  EXPECT_EQ(c->dspark_n_activated_experts, 3);
  EXPECT_EQ(c->route_scale, 1.5f);
  EXPECT_EQ(c->image_token_id, 129264);
  EXPECT_EQ(c->vision_n_layers, 32);
  EXPECT_EQ(c->max_position_embeddings, 1048576);
  EXPECT_EQ(c->bos_token_id, 0);
  EXPECT_EQ(c->eos_token_id, 1);
}

TEST(ConfigV41, TheV4ConfigReaderRefusesItByName) {
  // What builds a V4 model (verify, bench) says what V4.1 is
  // and where it runs.
  auto r = parse_model_config(released_config_json("v41-flash"), "config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("DeepSeek-V4.1"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("served by dsv4 serve and dsv4 run (on threads or MPI ranks)"), std::string::npos)
      << r.status().message();
  // A broken V4.1 config is named as broken, not as "not served".
  json broken = json::parse(released_config_json("v41-flash"));
  broken["text_config"]["kv_source_layer_ids"] = {8, 14, 20};
  r = parse_model_config(broken.dump(), "config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("layer 2 (ratio 2) has no KV source"), std::string::npos) << r.status().message();
}

TEST(ConfigV41, BrokenLayerRolesNameTheProblem) {
  struct Case {
    const char* key;
    json value;
    const char* expect;
  };
  const Case cases[] = {
      {"hidden_size", nullptr, "missing required field 'dim'"},
      {"kv_source_layer_ids", {2, 8, 14}, "layer 20 (ratio 1) has no KV source of its ratio"},
      {"kv_source_layer_ids", {1, 2, 8, 14, 20}, "kv_source_layers entry 1 is not a compressed layer"},
      {"index_source_layer_ids", {2, 8, 14, 24}, "kv_source_layers entry 20 is not in index_source_layers"},
      {"candidate_source_layer_id", 21, "candidate_source_layer 21 is not an index source"},
      {"candidate_block_size", 0, "candidate_topk_blocks and candidate_block_size must be positive"},
      {"engram_num_embeddings", {384006168}, "one entry per engram layer"},
      {"engram_head_dim", 100, "engram_head_dim a multiple of 32"},
      {"engram_layer_ids", {1, 40}, "engram_layer_ids must name layers"},
      {"compress_ratios", {0, 0, 2}, "compress_ratios has 3 entries, expected 43"},
      {"dspark_target_layer_ids", {39, 38}, "ascending"},
      {"dspark_num_experts_per_tok", 200, "dspark_n_activated_experts must be in"},
      {"head_dim", 500, "multiples of 32"},
      {"norm_topk_prob", false, "norm_topk_prob must be true"},
      {"scoring_func", "relu", "score_func must be"},
  };
  for (const auto& c : cases) {
    json j = json::parse(released_config_json("v41-flash"));
    if (c.value.is_null()) j["text_config"].erase(c.key);
    else j["text_config"][c.key] = c.value;
    auto r = parse_v41_model_config(j.dump(), "cfg.json");
    ASSERT_FALSE(r.ok()) << c.key;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << c.key << ": " << r.status().message();
  }
  json j = json::parse(released_config_json("v41-flash"));
  j["quantization_config"]["weight_block_size"] = {128, 128};
  auto r = parse_v41_model_config(j.dump(), "cfg.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("weight_block_size must be [32, 32]"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace dsv4
