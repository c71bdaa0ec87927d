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

}  // namespace

std::string released_config_json(const std::string& name) {
  if (name != "flash" && name != "pro") return "";
  nlohmann::json j = nlohmann::json::parse(kShared);
  j.merge_patch(nlohmann::json::parse(name == "flash" ? kFlash : kPro));
  return j.dump();
}

StatusOr<ModelConfig> released_config(const std::string& name) {
  const std::string json = released_config_json(name);
  if (json.empty()) return invalid_argument("unknown released model '" + name + "' (known: flash, pro)");
  return parse_model_config(json, "DeepSeek-V4-" + std::string(name == "flash" ? "Flash" : "Pro"));
}

}  // namespace dsv4
