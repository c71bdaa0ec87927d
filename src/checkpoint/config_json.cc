#include "checkpoint/config_json.h"

#include "checkpoint/json_fields.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace dsv4 {
namespace {

using nlohmann::json;

bool is_power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

using json_fields::read;

}  // namespace

StatusOr<ModelConfig> parse_model_config(const std::string& text, const std::string& src) try {
  DSV4_ASSIGN_OR_RETURN(json j, json_fields::parse(text, src));
  if (!j.is_object()) return invalid_argument(src + ": config must be a JSON object");
  if (is_v41_config(j)) {
    // Read and checked, so a broken V4.1 config is named as such. The
    // callers of this function build DeepSeek-V4's model; V4.1's is built
    // by load_deepseek_v41 (parse_any_model_config reads both).
    DSV4_ASSIGN_OR_RETURN(ModelConfig v41, parse_v41_model_config(text, src));
    return invalid_argument(src + ": DeepSeek-V4.1 (model_type deepseek_v41; " + v41.summary() +
                            ") is served by dsv4 serve and dsv4 run (on threads or MPI ranks); this command loads "
                            "DeepSeek-V4-Flash, its 0731 release and V4-Pro only");
  }
  ModelConfig c;
  DSV4_RETURN_IF_ERROR(read(j, "vocab_size", &c.vocab_size, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "hidden_size", &c.dim, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "moe_intermediate_size", &c.moe_inter_dim, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "num_hidden_layers", &c.n_layers, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "num_hash_layers", &c.n_hash_layers, false, src));
  DSV4_RETURN_IF_ERROR(read(j, "num_nextn_predict_layers", &c.n_mtp_layers, false, src));
  DSV4_RETURN_IF_ERROR(read(j, "num_attention_heads", &c.n_heads, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "n_routed_experts", &c.n_routed_experts, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "n_shared_experts", &c.n_shared_experts, false, src));
  DSV4_RETURN_IF_ERROR(read(j, "num_experts_per_tok", &c.n_activated_experts, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "routed_scaling_factor", &c.route_scale, false, src));
  DSV4_RETURN_IF_ERROR(read(j, "swiglu_limit", &c.swiglu_limit, false, src));
  DSV4_RETURN_IF_ERROR(read(j, "q_lora_rank", &c.q_lora_rank, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "head_dim", &c.head_dim, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "qk_rope_head_dim", &c.rope_head_dim, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "rms_norm_eps", &c.norm_eps, false, src));
  DSV4_RETURN_IF_ERROR(read(j, "o_groups", &c.o_groups, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "o_lora_rank", &c.o_lora_rank, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "sliding_window", &c.window_size, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "compress_rope_theta", &c.compress_rope_theta, false, src));
  DSV4_RETURN_IF_ERROR(read(j, "rope_theta", &c.rope_theta, false, src));
  DSV4_RETURN_IF_ERROR(read(j, "index_n_heads", &c.index_n_heads, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "index_head_dim", &c.index_head_dim, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "index_topk", &c.index_topk, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "hc_mult", &c.hc_mult, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "hc_sinkhorn_iters", &c.hc_sinkhorn_iters, false, src));
  DSV4_RETURN_IF_ERROR(read(j, "hc_eps", &c.hc_eps, false, src));
  DSV4_RETURN_IF_ERROR(read(j, "max_position_embeddings", &c.max_position_embeddings, true, src));
  DSV4_RETURN_IF_ERROR(read(j, "bos_token_id", &c.bos_token_id, false, src));
  DSV4_RETURN_IF_ERROR(read(j, "eos_token_id", &c.eos_token_id, false, src));
  DSV4_RETURN_IF_ERROR(read(j, "dspark_block_size", &c.dspark_block_size, false, src));
  DSV4_RETURN_IF_ERROR(read(j, "dspark_noise_token_id", &c.dspark_noise_token_id, false, src));
  DSV4_RETURN_IF_ERROR(read(j, "dspark_markov_rank", &c.dspark_markov_rank, false, src));
  DSV4_RETURN_IF_ERROR(json_fields::read_list(j, "dspark_target_layer_ids", &c.dspark_target_layer_ids, false, src));

  if (j.contains("scoring_func") && !j["scoring_func"].is_null()) {
    std::string f = j["scoring_func"].is_string() ? j["scoring_func"].get<std::string>() : "";
    if (f == "softmax") c.score_func = ScoreFunc::kSoftmax;
    else if (f == "sigmoid") c.score_func = ScoreFunc::kSigmoid;
    else if (f == "sqrtsoftplus") c.score_func = ScoreFunc::kSqrtSoftplus;
    else return invalid_argument(src + ": scoring_func must be softmax, sigmoid or sqrtsoftplus, got " + j["scoring_func"].dump());
  }
  if (!j.contains("compress_ratios") || !j["compress_ratios"].is_array()) {
    return invalid_argument(src + ": missing required array 'compress_ratios'");
  }
  for (const auto& r : j["compress_ratios"]) {
    if (!r.is_number_integer()) return invalid_argument(src + ": compress_ratios entries must be integers");
    c.compress_ratios.push_back(r.get<int>());
  }
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    const json& rs = j["rope_scaling"];
    std::string type = rs.value("type", rs.value("rope_type", std::string("yarn")));
    if (type != "yarn") return invalid_argument(src + ": rope_scaling type '" + type + "' is not supported (only yarn)");
    DSV4_RETURN_IF_ERROR(read(rs, "factor", &c.rope_factor, true, src + " rope_scaling"));
    DSV4_RETURN_IF_ERROR(read(rs, "original_max_position_embeddings", &c.original_seq_len, true, src + " rope_scaling"));
    DSV4_RETURN_IF_ERROR(read(rs, "beta_fast", &c.beta_fast, false, src + " rope_scaling"));
    DSV4_RETURN_IF_ERROR(read(rs, "beta_slow", &c.beta_slow, false, src + " rope_scaling"));
  }

  // Consistency: what the reference's forward needs (each rule says which
  // step of it), nothing more (tests/test_model_rules.cc has a case each).
  auto fail = [&](const std::string& m) { return invalid_argument(src + ": " + m); };
  if (c.vocab_size <= 0 || c.dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.moe_inter_dim <= 0)
    return fail("vocab_size, hidden_size, num_hidden_layers, num_attention_heads and moe_intermediate_size must be positive");
  // Layers (the MTP blocks too, numbered after the main ones) below
  // num_hash_layers route by token id.
  if (c.n_mtp_layers < 0 || c.n_hash_layers < 0)
    return fail("num_hash_layers and num_nextn_predict_layers must not be negative");
  if (c.has_dspark()) {
    // DSpark: the mtp.N blocks are the drafter's stages, one trailing ratio
    // each (the release's num_nextn_predict_layers of 1 does not count them).
    c.dspark_stages = static_cast<int>(c.compress_ratios.size()) - c.n_layers;
    c.n_mtp_layers = 0;
    if (c.dspark_stages < 1)
      return fail("dspark_block_size is set but compress_ratios has no entry after the " + std::to_string(c.n_layers) +
                  " layers for the DSpark stages");
    for (int s = 0; s < c.dspark_stages; ++s)
      if (c.compress_ratios[c.n_layers + s] != 0)
        return fail("DSpark stage " + std::to_string(s) + " has compress ratio " +
                    std::to_string(c.compress_ratios[c.n_layers + s]) + "; the stages attend a window ring only (0)");
    if (const std::string problem = c.dspark_drafter_problem(); !problem.empty()) return fail(problem);
  } else if (c.dspark_block_size < 0) {
    return fail("dspark_block_size must not be negative");
  }
  // Layer l (MTP block k, or DSpark stage k, is layer num_hidden_layers + k)
  // uses compress_ratios[l].
  const int extra = c.n_mtp_layers + c.dspark_stages;
  if (static_cast<int>(c.compress_ratios.size()) < c.n_layers + extra)
    return fail("compress_ratios has " + std::to_string(c.compress_ratios.size()) +
                " entries, expected num_hidden_layers + num_nextn_predict_layers = " + std::to_string(c.n_layers + extra));
  c.compress_ratios.resize(c.n_layers + extra);
  for (int r : c.compress_ratios)
    if (r < 0) return fail("compress_ratios entries must be 0 (window only) or a positive ratio, got " + std::to_string(r));
  // RoPE rotates pairs of the last qk_rope_head_dim dims (kv[..., -rd:]: 0 would be all of them).
  if (c.rope_head_dim <= 0 || c.rope_head_dim % 2 || c.rope_head_dim > c.head_dim)
    return fail("qk_rope_head_dim must be even, positive and at most head_dim");
  // act_quant(kv[..., :-rd], 64): the non-RoPE dims in whole FP8 blocks.
  if (c.nope_head_dim() % 64) return fail("head_dim - qk_rope_head_dim must be a multiple of 64 (FP8 KV rounding blocks)");
  // wo_a views the heads as o_groups groups.
  if (c.o_groups <= 0 || c.n_heads % c.o_groups) return fail("num_attention_heads must be divisible by o_groups");
  if (c.o_lora_rank <= 0 || c.q_lora_rank <= 0) return fail("q_lora_rank and o_lora_rank must be positive");
  if (c.window_size <= 0) return fail("sliding_window must be positive");
  if (c.n_routed_experts <= 0 || c.n_activated_experts <= 0 || c.n_activated_experts > c.n_routed_experts)
    return fail("num_experts_per_tok must be in [1, n_routed_experts]");
  if (c.n_shared_experts != 1) return fail("n_shared_experts must be 1 (DeepSeek-V4 has one shared expert)");
  // hc_split_sinkhorn runs max(iters - 1, 0) alternations after the first.
  if (c.hc_mult <= 0 || c.hc_sinkhorn_iters < 0) return fail("hc_mult must be positive and hc_sinkhorn_iters not negative");
  bool has_indexer = false;
  for (int r : c.compress_ratios) has_indexer |= (r == 4);
  if (has_indexer) {
    // The Hadamard rotation needs a power of two, fp4_act_quant whole blocks
    // of 32, and the queries' RoPE (q[..., -rd:]) fits in the head.
    if (!is_power_of_two(c.index_head_dim) || c.index_head_dim % 32 || c.index_head_dim < c.rope_head_dim)
      return fail("index_head_dim must be a power of two, a multiple of 32 and at least qk_rope_head_dim");
    if (c.index_n_heads <= 0 || c.index_topk < 0)
      return fail("index_n_heads must be positive and index_topk not negative");
  }
  if (c.max_position_embeddings <= 0) return fail("max_position_embeddings must be positive");
  if (c.original_seq_len < 0 || c.rope_factor <= 0) return fail("rope_scaling factor and original_max_position_embeddings must be positive");
  return c;
} catch (const json::exception& e) {
  // A field of the wrong JSON type that no check above names (e.g. a numeric
  // rope_scaling.type): a broken config, not a crash.
  return invalid_argument(src + ": a field has the wrong JSON type: " + e.what());
}

namespace {

StatusOr<std::string> read_config_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot read config '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

StatusOr<ModelConfig> load_model_config(const std::string& path) {
  DSV4_ASSIGN_OR_RETURN(const std::string text, read_config_text(path));
  return parse_model_config(text, path);
}

StatusOr<ModelConfig> parse_any_model_config(const std::string& text, const std::string& src) try {
  DSV4_ASSIGN_OR_RETURN(json j, json_fields::parse(text, src));
  if (j.is_object() && is_v41_config(j)) return parse_v41_model_config(text, src);
  return parse_model_config(text, src);
} catch (const json::exception& e) {
  return invalid_argument(src + ": " + e.what());
}

StatusOr<ModelConfig> load_any_model_config(const std::string& path) {
  DSV4_ASSIGN_OR_RETURN(const std::string text, read_config_text(path));
  return parse_any_model_config(text, path);
}

std::string model_config_json(const ModelConfig& c) {
  json j;
  j["architectures"] = {"DeepseekV4ForCausalLM"};
  j["model_type"] = "deepseek_v4";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.dim;
  j["moe_intermediate_size"] = c.moe_inter_dim;
  j["num_hidden_layers"] = c.n_layers;
  j["num_hash_layers"] = c.n_hash_layers;
  j["num_nextn_predict_layers"] = c.n_mtp_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = 1;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["num_experts_per_tok"] = c.n_activated_experts;
  j["scoring_func"] = c.score_func == ScoreFunc::kSoftmax ? "softmax" : c.score_func == ScoreFunc::kSigmoid ? "sigmoid" : "sqrtsoftplus";
  j["routed_scaling_factor"] = c.route_scale;
  j["norm_topk_prob"] = true;
  j["swiglu_limit"] = c.swiglu_limit;
  j["q_lora_rank"] = c.q_lora_rank;
  j["head_dim"] = c.head_dim;
  j["qk_rope_head_dim"] = c.rope_head_dim;
  j["rms_norm_eps"] = c.norm_eps;
  j["o_groups"] = c.o_groups;
  j["o_lora_rank"] = c.o_lora_rank;
  j["sliding_window"] = c.window_size;
  j["compress_ratios"] = c.compress_ratios;
  j["compress_rope_theta"] = c.compress_rope_theta;
  j["rope_theta"] = c.rope_theta;
  if (c.original_seq_len > 0) {
    j["rope_scaling"] = {{"type", "yarn"}, {"factor", c.rope_factor}, {"original_max_position_embeddings", c.original_seq_len},
                         {"beta_fast", c.beta_fast}, {"beta_slow", c.beta_slow}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["index_n_heads"] = c.index_n_heads;
  j["index_head_dim"] = c.index_head_dim;
  j["index_topk"] = c.index_topk;
  j["hc_mult"] = c.hc_mult;
  j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  j["hc_eps"] = c.hc_eps;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_id;
  if (c.has_dspark()) {
    j["dspark_block_size"] = c.dspark_block_size;
    j["dspark_markov_rank"] = c.dspark_markov_rank;
    j["dspark_noise_token_id"] = c.dspark_noise_token_id;
    j["dspark_target_layer_ids"] = c.dspark_target_layer_ids;
  }
  j["torch_dtype"] = "bfloat16";
  j["tie_word_embeddings"] = false;
  return j.dump(2);
}

}  // namespace dsv4
