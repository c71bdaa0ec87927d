// Model hyperparameters (checkpoint/config_json.h reads them from a
// released checkpoint's config.json).
#pragma once

#include <cstdint>
#include <string>
#include <vector>


namespace dsv4 {

enum class ScoreFunc { kSoftmax, kSigmoid, kSqrtSoftplus };

// DeepSeek-V4 (V4-Flash, its 0731 release, Pro) or DeepSeek-V4.1 (V4.1-Flash:
// shared compression sources, ratios 2 and 1, the two-level top-k, Engram).
enum class ModelFamily { kV4, kV41 };

// DeepSeek-V4.1: the few layers that compute what the others share (the
// reference's SharedAttentionRuntime). A layer with a nonzero ratio reads the
// compressed KV and index keys of the latest KV source at or before it and
// the top-k of the latest index source; index sources after the candidate
// source pick only inside the blocks it selected.
struct SharedSources {
  std::vector<int> kv_source_layers;     // own a compressor, compressed KV, index keys
  std::vector<int> index_source_layers;  // run an indexer
  int candidate_source_layer = -1;       // publishes candidate blocks; -1: no two-level top-k
  int candidate_topk_blocks = 0;
  int candidate_block_size = 0;
};

// DeepSeek-V4.1's Engram: before each of layer_ids, hashed n-grams of the
// (case-folded) token ids fetch rows of a table whose gated projection is
// added to the residual stream.
struct EngramConfig {
  std::vector<int> layer_ids;
  std::vector<int64_t> num_embeddings;  // table rows, one per layer
  int max_ngram_size = 1;
  int64_t vocab_size = 0;               // where each hash head's prime search starts
  int n_heads = 0;
  int head_dim = 0;
  int pad_id = 2;
  int compressed_vocab_size = 0;        // the token map's size, checked against the tokenizer's
  bool enabled() const { return !layer_ids.empty(); }
  int hash_columns() const { return (max_ngram_size - 1) * n_heads; }
};

struct ModelConfig {
  ModelFamily family = ModelFamily::kV4;
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
  // DeepSeek-V4.1 only.
  SharedSources shared;
  EngramConfig engram;
  int dspark_n_routed_experts = 0;    // the stages' own experts (0: as the trunk)
  int dspark_n_activated_experts = 0;
  float gate_temp = 1.0f;             // router logits are divided by it
  int weight_block = 128;             // FP8 weight tiles and activation rounding blocks (V4.1: 32)
  int image_token_id = -1;
  int vision_n_layers = 0;            // 0: no vision tower

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
  // What the DSpark drafter's forward needs of its fields (the noise token,
  // the Markov rank, ascending taps below n_layers); empty when it has it.
  std::string dspark_drafter_problem() const;
};

}  // namespace dsv4
