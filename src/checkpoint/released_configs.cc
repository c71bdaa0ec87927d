#include "checkpoint/released_configs.h"
#include "checkpoint/config_json.h"

#include <nlohmann/json.hpp>

namespace dsv4 {
namespace {

// From the released config.json files (the fields dsv4 reads): what both
// share, then each one's own.
const char* kShared = R"({
  "hc_eps": 1e-06, "hc_mult": 4, "hc_sinkhorn_iters": 20, "head_dim": 512, "index_head_dim": 128,
  "index_n_heads": 64, "max_position_embeddings": 1048576, "n_shared_experts": 1, "num_experts_per_tok": 6,
  "num_hash_layers": 3, "num_nextn_predict_layers": 1, "o_lora_rank": 1024, "qk_rope_head_dim": 64,
  "rms_norm_eps": 1e-06, "rope_theta": 10000, "compress_rope_theta": 160000, "scoring_func": "sqrtsoftplus",
  "sliding_window": 128, "swiglu_limit": 10.0, "vocab_size": 129280, "bos_token_id": 0, "eos_token_id": 1,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 16, "original_max_position_embeddings": 65536, "type": "yarn"}
})";

const char* kFlash = R"({
  "hidden_size": 4096, "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_attention_heads": 64,
  "num_hidden_layers": 43, "o_groups": 8, "q_lora_rank": 1024, "index_topk": 512, "routed_scaling_factor": 1.5,
  "compress_ratios": [
    0, 0, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4,
    128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 0]
})";

const char* kPro = R"({
  "hidden_size": 7168, "moe_intermediate_size": 3072, "n_routed_experts": 384, "num_attention_heads": 128,
  "num_hidden_layers": 61, "o_groups": 16, "q_lora_rank": 1536, "index_topk": 1024, "routed_scaling_factor": 2.5,
  "compress_ratios": [
    128, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4,
    128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128,
    4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 0]
})";

// DeepSeek-V4.1-Flash's config.json as released (revision dba1be0a), the
// fields dsv4 reads.
const char* kV41Flash = R"({
  "architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41", "bos_token_id": 0, "eos_token_id": 1,
  "pad_token_id": 2, "image_token_id": 129264,
  "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [32, 32],
                          "scale_fmt": "ue8m0", "expert_dtype": "fp4"},
  "text_config": {
    "model_type": "deepseek_v41_text", "vocab_size": 129280, "hidden_size": 5120, "moe_intermediate_size": 2304,
    "num_hidden_layers": 40, "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512,
    "qk_rope_head_dim": 64, "q_lora_rank": 1280, "o_lora_rank": 1024, "o_groups": 8, "hidden_act": "silu",
    "swiglu_limit": 10.0, "rms_norm_eps": 1e-20, "max_position_embeddings": 1048576, "rope_theta": 10000,
    "rope_scaling": {"rope_type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1,
                     "original_max_position_embeddings": 65536},
    "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 6, "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc", "norm_topk_prob": true, "routed_scaling_factor": 1.5, "sliding_window": 128,
    "compress_ratios": [0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0],
    "compress_rope_theta": 160000, "kv_source_layer_ids": [2, 8, 14, 20],
    "index_source_layer_ids": [2, 8, 14, 20, 24, 28, 32, 36], "index_n_heads": 32, "index_head_dim": 128,
    "index_topk": 512, "candidate_source_layer_id": 20, "candidate_topk_blocks": 2048, "candidate_block_size": 8,
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-06, "engram_layer_ids": [1, 14],
    "engram_num_embeddings": [384006168, 384016682], "engram_max_ngram_size": 4, "engram_vocab_size": 16000000,
    "engram_n_heads": 8, "engram_head_dim": 256, "engram_pad_token_id": 2, "engram_compressed_vocab_size": 99092,
    "num_nextn_predict_layers": 3, "dspark_block_size": 5, "dspark_noise_token_id": 128799,
    "dspark_target_layer_ids": [37, 38, 39], "dspark_markov_rank": 256, "dspark_n_routed_experts": 128,
    "dspark_num_experts_per_tok": 3},
  "vision_config": {"model_type": "deepseek_v41_vision", "num_hidden_layers": 32, "hidden_size": 1024,
                    "num_attention_heads": 16, "intermediate_size": 2816, "patch_size": 14, "rope_theta": 10000,
                    "downsample_ratio": 3, "max_image_tokens": 1024, "min_pixels": 295936, "max_wh_ratio": null}
})";

}  // namespace

std::string released_config_json(const std::string& name) {
  if (name == "v41-flash") return nlohmann::json::parse(kV41Flash).dump();
  if (name != "flash" && name != "pro") return "";
  nlohmann::json j = nlohmann::json::parse(kShared);
  j.merge_patch(nlohmann::json::parse(name == "flash" ? kFlash : kPro));
  return j.dump();
}

StatusOr<ModelConfig> released_config(const std::string& name) {
  const std::string json = released_config_json(name);
  if (json.empty()) return invalid_argument("unknown released model '" + name + "' (known: flash, pro, v41-flash)");
  if (name == "v41-flash") return parse_any_model_config(json, "DeepSeek-V4.1-Flash");
  return parse_model_config(json, "DeepSeek-V4-" + std::string(name == "flash" ? "Flash" : "Pro"));
}

}  // namespace dsv4
