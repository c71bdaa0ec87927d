// DeepSeek-V4.1's config.json, in the release's nested HuggingFace form
// (model_type deepseek_v41, text_config, vision_config, quantization_config)
// or the reference's flat ModelArgs form (inference/config.json): both are
// mapped onto the ModelArgs names, then read and checked once.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "checkpoint/config_json.h"
#include "checkpoint/json_fields.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using json_fields::read;
using json_fields::read_list;

// text_config key -> ModelArgs key, where they differ.
const std::pair<const char*, const char*> kRenamed[] = {
    {"hidden_size", "dim"},
    {"moe_intermediate_size", "moe_inter_dim"},
    {"num_hidden_layers", "n_layers"},
    {"num_nextn_predict_layers", "n_mtp_layers"},
    {"num_attention_heads", "n_heads"},
    {"num_experts_per_tok", "n_activated_experts"},
    {"scoring_func", "score_func"},
    {"routed_scaling_factor", "route_scale"},
    {"qk_rope_head_dim", "rope_head_dim"},
    {"rms_norm_eps", "norm_eps"},
    {"sliding_window", "window_size"},
    {"kv_source_layer_ids", "kv_source_layers"},
    {"index_source_layer_ids", "index_source_layers"},
    {"candidate_source_layer_id", "candidate_source_layer"},
    {"engram_pad_token_id", "engram_pad_id"},
    {"dspark_num_experts_per_tok", "dspark_n_activated_experts"},
};

// The nested release form flattened onto ModelArgs names.
json model_args_of_release(const json& root) {
  json args = json::object();
  for (const auto& [key, value] : root["text_config"].items()) args[key] = value;
  for (const auto& [from, to] : kRenamed)
    if (args.contains(from)) {
      args[to] = args[from];
      args.erase(from);
    }
  if (args.contains("rope_scaling") && args["rope_scaling"].is_object()) {
    const json rs = args["rope_scaling"];
    if (rs.contains("factor")) args["rope_factor"] = rs["factor"];
    if (rs.contains("beta_fast")) args["beta_fast"] = rs["beta_fast"];
    if (rs.contains("beta_slow")) args["beta_slow"] = rs["beta_slow"];
    if (rs.contains("original_max_position_embeddings")) args["original_seq_len"] = rs["original_max_position_embeddings"];
  }
  if (root.contains("image_token_id")) args["image_token_id"] = root["image_token_id"];
  for (const char* k : {"bos_token_id", "eos_token_id"})
    if (root.contains(k) && !args.contains(k)) args[k] = root[k];
  if (root.contains("vision_config") && root["vision_config"].is_object() &&
      root["vision_config"].contains("num_hidden_layers"))
    args["vision_n_layers"] = root["vision_config"]["num_hidden_layers"];
  const json q = root.value("quantization_config", json());
  if (q.is_object()) {
    if (q.value("quant_method", "") == "fp8") args["dtype"] = "fp8";
    if (q.contains("expert_dtype")) args["expert_dtype"] = q["expert_dtype"];
    if (q.contains("weight_block_size")) args["weight_block_size"] = q["weight_block_size"];
  }
  return args;
}

Status read_model_args(const json& a, const std::string& src, ModelConfig* out) {
  ModelConfig& c = *out;
  c.family = ModelFamily::kV41;
  c.weight_block = 32;  // model.py: fp8_block_size = 32 (weights and activations)
  c.norm_eps = 1e-20f;  // ModelArgs' default
  DSV4_RETURN_IF_ERROR(read(a, "vocab_size", &c.vocab_size, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "dim", &c.dim, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "moe_inter_dim", &c.moe_inter_dim, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "n_layers", &c.n_layers, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "n_mtp_layers", &c.n_mtp_layers, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "n_heads", &c.n_heads, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "n_routed_experts", &c.n_routed_experts, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "n_shared_experts", &c.n_shared_experts, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "n_activated_experts", &c.n_activated_experts, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "route_scale", &c.route_scale, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "gate_temp", &c.gate_temp, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "swiglu_limit", &c.swiglu_limit, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "q_lora_rank", &c.q_lora_rank, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "head_dim", &c.head_dim, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "rope_head_dim", &c.rope_head_dim, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "norm_eps", &c.norm_eps, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "o_groups", &c.o_groups, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "o_lora_rank", &c.o_lora_rank, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "window_size", &c.window_size, true, src));
  DSV4_RETURN_IF_ERROR(read_list(a, "compress_ratios", &c.compress_ratios, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "compress_rope_theta", &c.compress_rope_theta, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "rope_theta", &c.rope_theta, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "original_seq_len", &c.original_seq_len, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "rope_factor", &c.rope_factor, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "beta_fast", &c.beta_fast, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "beta_slow", &c.beta_slow, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "index_n_heads", &c.index_n_heads, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "index_head_dim", &c.index_head_dim, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "index_topk", &c.index_topk, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "hc_mult", &c.hc_mult, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "hc_sinkhorn_iters", &c.hc_sinkhorn_iters, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "hc_eps", &c.hc_eps, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "bos_token_id", &c.bos_token_id, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "eos_token_id", &c.eos_token_id, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "image_token_id", &c.image_token_id, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "vision_n_layers", &c.vision_n_layers, false, src));
  SharedSources& sh = c.shared;
  DSV4_RETURN_IF_ERROR(read_list(a, "kv_source_layers", &sh.kv_source_layers, true, src));
  DSV4_RETURN_IF_ERROR(read_list(a, "index_source_layers", &sh.index_source_layers, true, src));
  DSV4_RETURN_IF_ERROR(read(a, "candidate_source_layer", &sh.candidate_source_layer, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "candidate_topk_blocks", &sh.candidate_topk_blocks, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "candidate_block_size", &sh.candidate_block_size, false, src));
  EngramConfig& e = c.engram;
  DSV4_RETURN_IF_ERROR(read_list(a, "engram_layer_ids", &e.layer_ids, false, src));
  DSV4_RETURN_IF_ERROR(read_list(a, "engram_num_embeddings", &e.num_embeddings, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "engram_max_ngram_size", &e.max_ngram_size, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "engram_vocab_size", &e.vocab_size, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "engram_n_heads", &e.n_heads, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "engram_head_dim", &e.head_dim, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "engram_pad_id", &e.pad_id, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "engram_compressed_vocab_size", &e.compressed_vocab_size, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "dspark_block_size", &c.dspark_block_size, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "dspark_noise_token_id", &c.dspark_noise_token_id, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "dspark_markov_rank", &c.dspark_markov_rank, false, src));
  DSV4_RETURN_IF_ERROR(read_list(a, "dspark_target_layer_ids", &c.dspark_target_layer_ids, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "dspark_n_routed_experts", &c.dspark_n_routed_experts, false, src));
  DSV4_RETURN_IF_ERROR(read(a, "dspark_n_activated_experts", &c.dspark_n_activated_experts, false, src));

  const std::string score = a.value("score_func", std::string("sqrtsoftplus"));
  if (score == "softmax") c.score_func = ScoreFunc::kSoftmax;
  else if (score == "sigmoid") c.score_func = ScoreFunc::kSigmoid;
  else if (score == "sqrtsoftplus") c.score_func = ScoreFunc::kSqrtSoftplus;
  else return invalid_argument(src + ": score_func must be softmax, sigmoid or sqrtsoftplus, got '" + score + "'");
  // Linear dispatches on the weight's dtype; only the released formats load.
  if (a.value("dtype", std::string("fp8")) != "fp8" && a.value("dtype", std::string("fp8")) != "bf16")
    return invalid_argument(src + ": dtype must be fp8 or bf16");
  if (a.contains("weight_block_size") && a["weight_block_size"] != json::array({32, 32}))
    return invalid_argument(src + ": weight_block_size must be [32, 32] (DeepSeek-V4.1's FP8 tiles), got " +
                            a["weight_block_size"].dump());
  if (a.contains("norm_topk_prob") && a["norm_topk_prob"] != true)
    return invalid_argument(src + ": norm_topk_prob must be true (the release renormalizes the top-k weights)");
  // max_position_embeddings is HF's; the reference form's context is its
  // runtime max_seq_len, or the YaRN-extended length.
  if (a.contains("max_position_embeddings")) {
    DSV4_RETURN_IF_ERROR(read(a, "max_position_embeddings", &c.max_position_embeddings, true, src));
  } else if (a.contains("max_seq_len")) {
    DSV4_RETURN_IF_ERROR(read(a, "max_seq_len", &c.max_position_embeddings, true, src));
  } else {
    c.max_position_embeddings = c.original_seq_len > 0 ? static_cast<int>(c.original_seq_len * c.rope_factor) : 4096;
  }
  return Status::Ok();
}

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// What the reference's forward needs of the layer roles (each rule names the
// step that needs it).
Status check_v41(ModelConfig& c, const std::string& src) {
  auto fail = [&](const std::string& m) { return invalid_argument(src + ": " + m); };
  if (c.vocab_size <= 0 || c.dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.moe_inter_dim <= 0)
    return fail("vocab_size, dim, n_layers, n_heads and moe_inter_dim must be positive");
  if (c.n_mtp_layers < 0) return fail("n_mtp_layers must not be negative");
  // The DSpark stages are the mtp.N blocks, one ratio entry each (DSparkAttention asserts 0).
  const int stages = c.dspark_block_size > 0 ? c.n_mtp_layers : 0;
  if (static_cast<int>(c.compress_ratios.size()) < c.n_layers + stages)
    return fail("compress_ratios has " + std::to_string(c.compress_ratios.size()) + " entries, expected " +
                std::to_string(c.n_layers + stages) + " (one per layer and DSpark stage)");
  c.compress_ratios.resize(c.n_layers + stages);
  for (int s = 0; s < stages; ++s)
    if (c.compress_ratios[c.n_layers + s] != 0) return fail("DSpark stage " + std::to_string(s) + " must have compress ratio 0");
  for (int r : c.compress_ratios)
    if (r < 0) return fail("compress_ratios entries must not be negative");
  // FP8 rounding of the whole window KV row and of every FP8 linear's input
  // in blocks of 32; FP4 rounding of compressed KV in 16s and index q/k in 32s.
  if (c.head_dim % 32 || c.dim % 32 || c.q_lora_rank % 32 || c.moe_inter_dim % 32)
    return fail("head_dim, dim, q_lora_rank and moe_inter_dim must be multiples of 32 (FP8 blocks of 32)");
  if (c.rope_head_dim <= 0 || c.rope_head_dim % 2 || c.rope_head_dim > c.head_dim)
    return fail("rope_head_dim must be even, positive and at most head_dim");
  if (c.o_groups <= 0 || c.n_heads % c.o_groups || c.o_lora_rank <= 0 || c.q_lora_rank <= 0)
    return fail("n_heads must be divisible by o_groups, and q_lora_rank and o_lora_rank positive");
  if (c.window_size <= 0) return fail("window_size must be positive");
  if (c.n_routed_experts <= 0 || c.n_activated_experts <= 0 || c.n_activated_experts > c.n_routed_experts)
    return fail("n_activated_experts must be in [1, n_routed_experts]");
  if (c.n_shared_experts != 1) return fail("n_shared_experts must be 1");
  if (c.hc_mult <= 0 || c.hc_sinkhorn_iters < 0) return fail("hc_mult must be positive and hc_sinkhorn_iters not negative");
  if (c.gate_temp <= 0) return fail("gate_temp must be positive");

  // Shared sources: a compressed layer reads the latest KV source and index
  // source at or before it, which must compress at its ratio.
  const SharedSources& sh = c.shared;
  for (int l : sh.kv_source_layers)
    if (l < 0 || l >= c.n_layers || c.compress_ratios[l] <= 0)
      return fail("kv_source_layers entry " + std::to_string(l) + " is not a compressed layer");
  for (int l : sh.index_source_layers)
    if (l < 0 || l >= c.n_layers || c.compress_ratios[l] <= 0)
      return fail("index_source_layers entry " + std::to_string(l) + " is not a compressed layer");
  // A KV source's latent gives the index keys the indexers read, so each
  // is an index source too (as in the release).
  for (int l : sh.kv_source_layers)
    if (!contains(sh.index_source_layers, l))
      return fail("kv_source_layers entry " + std::to_string(l) + " is not in index_source_layers (a KV source's "
                  "latent gives the index keys)");
  int kv_source = -1, index_source = -1;
  for (int l = 0; l < c.n_layers; ++l) {
    if (contains(sh.kv_source_layers, l)) kv_source = l;
    if (contains(sh.index_source_layers, l)) index_source = l;
    const int r = c.compress_ratios[l];
    if (r == 0) continue;
    if (kv_source < 0 || c.compress_ratios[kv_source] != r)
      return fail("layer " + std::to_string(l) + " (ratio " + std::to_string(r) +
                  ") has no KV source of its ratio at or before it in kv_source_layers");
    if (index_source < 0 || c.compress_ratios[index_source] != r)
      return fail("layer " + std::to_string(l) + " (ratio " + std::to_string(r) +
                  ") has no index source of its ratio at or before it in index_source_layers");
  }
  if (c.index_n_heads <= 0 || c.index_head_dim % 32 || c.index_head_dim < c.rope_head_dim || c.index_topk < 0)
    return fail("index_n_heads must be positive, index_head_dim a multiple of 32 of at least rope_head_dim, index_topk not negative");
  if (sh.candidate_source_layer >= 0) {
    // select_candidate_blocks: the consumers mask scores of the source's width.
    if (!contains(sh.index_source_layers, sh.candidate_source_layer))
      return fail("candidate_source_layer " + std::to_string(sh.candidate_source_layer) + " is not an index source");
    if (sh.candidate_topk_blocks <= 0 || sh.candidate_block_size <= 0)
      return fail("candidate_topk_blocks and candidate_block_size must be positive with a candidate source");
    for (int l : sh.index_source_layers)
      if (l > sh.candidate_source_layer && c.compress_ratios[l] != c.compress_ratios[sh.candidate_source_layer])
        return fail("index source " + std::to_string(l) + " after the candidate source must have its ratio");
  }

  const EngramConfig& e = c.engram;
  if (e.enabled()) {
    if (e.num_embeddings.size() != e.layer_ids.size())
      return fail("engram_num_embeddings must have one entry per engram layer");
    for (size_t i = 0; i < e.layer_ids.size(); ++i) {
      if (e.layer_ids[i] < 0 || e.layer_ids[i] >= c.n_layers) return fail("engram_layer_ids must name layers");
      if (e.num_embeddings[i] <= 0) return fail("engram_num_embeddings must be positive");
    }
    // Table rows carry one e8m0 scale per 32 values.
    if (e.max_ngram_size < 2 || e.n_heads <= 0 || e.head_dim <= 0 || e.head_dim % 32 || e.vocab_size <= 0 ||
        e.compressed_vocab_size <= 0)
      return fail("engram_max_ngram_size must be at least 2, engram_head_dim a multiple of 32, and engram_n_heads, "
                  "engram_vocab_size and engram_compressed_vocab_size positive");
    if (e.pad_id < 0 || e.pad_id >= c.vocab_size) return fail("engram_pad_id must be a token id");
  }
  if (c.dspark_block_size < 0) return fail("dspark_block_size must not be negative");
  if (c.dspark_block_size > 0) {
    c.dspark_stages = stages;
    c.n_mtp_layers = 0;
    if (stages < 1) return fail("dspark_block_size is set but n_mtp_layers names no stage");
    if (const std::string problem = c.dspark_drafter_problem(); !problem.empty()) return fail(problem);
    const int routed = c.dspark_n_routed_experts ? c.dspark_n_routed_experts : c.n_routed_experts;
    const int active = c.dspark_n_activated_experts ? c.dspark_n_activated_experts : c.n_activated_experts;
    if (routed <= 0 || active <= 0 || active > routed)
      return fail("dspark_n_activated_experts must be in [1, dspark_n_routed_experts]");
  } else if (c.n_mtp_layers > 0) {
    return fail("n_mtp_layers without dspark_block_size: DeepSeek-V4.1's extra layers are DSpark stages");
  }
  if (c.max_position_embeddings <= 0) return fail("max_position_embeddings must be positive");
  if (c.original_seq_len < 0 || c.rope_factor <= 0) return fail("rope_factor and original_seq_len must be positive");
  return Status::Ok();
}

}  // namespace

bool is_v41_config(const nlohmann::json& j) {
  return j.is_object() && (j.value("model_type", "") == "deepseek_v41" || j.contains("text_config") ||
                           j.contains("kv_source_layers") || j.contains("index_source_layers"));
}

StatusOr<ModelConfig> parse_v41_model_config(const std::string& text, const std::string& src) try {
  DSV4_ASSIGN_OR_RETURN(json j, json_fields::parse(text, src));
  if (!is_v41_config(j)) return invalid_argument(src + ": not a DeepSeek-V4.1 config");
  if (j.contains("text_config") && !j["text_config"].is_object())
    return invalid_argument(src + ": text_config must be an object");
  const json args = j.contains("text_config") ? model_args_of_release(j) : j;
  ModelConfig c;
  DSV4_RETURN_IF_ERROR(read_model_args(args, src, &c));
  DSV4_RETURN_IF_ERROR(check_v41(c, src));
  return c;
} catch (const json::exception& e) {
  return invalid_argument(src + ": a field has the wrong JSON type: " + e.what());
}

}  // namespace dsv4
