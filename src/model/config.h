// Model hyperparameters (checkpoint/config_json.h reads them from a
// released checkpoint's config.json).
#pragma once

#include <string>
#include <vector>


namespace dsv4 {

enum class ScoreFunc { kSoftmax, kSigmoid, kSqrtSoftplus };

struct ModelConfig {
  int vocab_size = 0;
  int dim = 0;                 // hidden_size
  int moe_inter_dim = 0;       // moe_intermediate_size
  int n_layers = 0;            // num_hidden_layers
  int n_hash_layers = 0;       // num_hash_layers
  int n_mtp_layers = 0;        // num_nextn_predict_layers
  int n_heads = 0;             // num_attention_heads
  int n_routed_experts = 0;
  int n_shared_experts = 1;
  int n_activated_experts = 0; // num_experts_per_tok
  ScoreFunc score_func = ScoreFunc::kSqrtSoftplus;
  float route_scale = 1.0f;    // routed_scaling_factor
  float swiglu_limit = 0.0f;
  int q_lora_rank = 0;
  int head_dim = 0;
  int rope_head_dim = 0;       // qk_rope_head_dim
  float norm_eps = 1e-6f;      // rms_norm_eps
  int o_groups = 0;
  int o_lora_rank = 0;
  int window_size = 0;         // sliding_window
  std::vector<int> compress_ratios;  // n_layers + n_mtp_layers (+ dspark_stages) entries
  float compress_rope_theta = 40000.0f;
  float rope_theta = 10000.0f;
  // YaRN (rope_scaling); original_seq_len 0 means plain RoPE everywhere.
  int original_seq_len = 0;
  float rope_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;
  int hc_mult = 0;
  int hc_sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  int max_position_embeddings = 0;
  int bos_token_id = -1;
  int eos_token_id = -1;
  // The DSpark drafter (DeepSeek-V4-Flash-DSpark): stages mtp.0..n-1, full
  // V4 blocks after the main layers, that read taps of the target's layers
  // and propose dspark_block_size tokens per step (model/dspark.cc). The
  // release's num_nextn_predict_layers says 1 although there are 3 stages:
  // they are counted from compress_ratios (one trailing 0 per stage).
  int dspark_block_size = 0;  // 0: no DSpark drafter
  int dspark_stages = 0;
  int dspark_noise_token_id = 0;
  int dspark_markov_rank = 0;
  std::vector<int> dspark_target_layer_ids;  // ascending

  int nope_head_dim() const { return head_dim - rope_head_dim; }
  int mix_hc() const { return (2 + hc_mult) * hc_mult; }
  int compress_ratio(int layer) const { return compress_ratios[layer]; }
  bool is_hash_layer(int layer) const { return layer < n_hash_layers; }
  bool has_dspark() const { return dspark_block_size > 0; }
  int dspark_taps() const { return static_cast<int>(dspark_target_layer_ids.size()); }
  // Cache layer of DSpark stage s: its ring is the window rows of that
  // layer (after the main and MTP layers), so it pages like the window KV.
  int dspark_cache_layer(int stage) const { return n_layers + n_mtp_layers + stage; }
  std::string summary() const;
};

}  // namespace dsv4
