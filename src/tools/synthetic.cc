#include "tools/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "checkpoint/config_json.h"
#include "checkpoint/released_configs.h"
#include "tools/synthetic_output.h"

namespace dsv4 {
namespace {

// SyntheticOptions::dspark_drafts_agree: the logit of repeating the token
// read, the others near 0 (greedy repeats; at temperature 1 with top-k 3
// the repeat has about two thirds of the mass).
constexpr float kRepeatMargin = 2.0f;

void write_block(ShardedOutput& out, const ModelConfig& c, const std::string& p, int layer) {
  const int64_t dim = c.dim, hd = c.head_dim, heads = c.n_heads, ratio = c.compress_ratio(layer);
  auto norm = [&](const std::string& name, int64_t n) { out.bf16(name, {n}, out.random({n}, 0.1f, 1.0f)); };
  out.f32(p + "attn.attn_sink", {heads}, out.random({heads}, 1.0f));
  out.linear(p + "attn.wq_a", c.q_lora_rank, dim, 1);
  norm(p + "attn.q_norm.weight", c.q_lora_rank);
  out.linear(p + "attn.wq_b", heads * hd, c.q_lora_rank, 1);
  out.linear(p + "attn.wkv", hd, dim, 1);
  norm(p + "attn.kv_norm.weight", hd);
  out.linear(p + "attn.wo_a", int64_t{c.o_groups} * c.o_lora_rank, heads * hd / c.o_groups, 1);
  out.linear(p + "attn.wo_b", dim, int64_t{c.o_groups} * c.o_lora_rank, 1);
  auto compressor = [&](const std::string& q, int64_t head_dim) {
    const int64_t width = (ratio == 4 ? 2 : 1) * head_dim;
    out.linear(q + ".wkv", width, dim, 0);
    out.linear(q + ".wgate", width, dim, 0);
    out.f32(q + ".ape", {ratio, width}, out.random({ratio, width}, 0.5f));
    norm(q + ".norm.weight", head_dim);
  };
  if (ratio) {
    compressor(p + "attn.compressor", hd);
    if (ratio == 4) {
      out.linear(p + "attn.indexer.wq_b", int64_t{c.index_n_heads} * c.index_head_dim, c.q_lora_rank, 1);
      out.linear(p + "attn.indexer.weights_proj", c.index_n_heads, dim, 0);
      compressor(p + "attn.indexer.compressor", c.index_head_dim);
    }
  }
  norm(p + "attn_norm.weight", dim);
  norm(p + "ffn_norm.weight", dim);
  out.bf16(p + "ffn.gate.weight", {c.n_routed_experts, dim}, out.random({c.n_routed_experts, dim}, 1.0f / std::sqrt(static_cast<float>(dim))));
  if (c.is_hash_layer(layer)) {
    // Each token hashes to k distinct experts.
    std::vector<int64_t> ids;
    for (int t = 0; t < c.vocab_size; ++t) {
      std::vector<int64_t> picked;
      while (static_cast<int>(picked.size()) < c.n_activated_experts) {
        int64_t e = static_cast<int64_t>(out.rng().next() % c.n_routed_experts);
        if (std::find(picked.begin(), picked.end(), e) == picked.end()) picked.push_back(e);
      }
      ids.insert(ids.end(), picked.begin(), picked.end());
    }
    out.i64(p + "ffn.gate.tid2eid", {c.vocab_size, c.n_activated_experts}, ids);
  } else {
    out.f32(p + "ffn.gate.bias", {c.n_routed_experts}, out.random({c.n_routed_experts}, 0.1f));
  }
  for (int e = 0; e < c.n_routed_experts; ++e) {
    const std::string q = p + "ffn.experts." + std::to_string(e);
    out.linear(q + ".w1", c.moe_inter_dim, dim, 2);
    out.linear(q + ".w2", dim, c.moe_inter_dim, 2);
    out.linear(q + ".w3", c.moe_inter_dim, dim, 2);
  }
  out.linear(p + "ffn.shared_experts.w1", c.moe_inter_dim, dim, 1);
  out.linear(p + "ffn.shared_experts.w2", dim, c.moe_inter_dim, 1);
  out.linear(p + "ffn.shared_experts.w3", c.moe_inter_dim, dim, 1);
  const int64_t mix = c.mix_hc(), flat = int64_t{c.hc_mult} * dim;
  for (const char* which : {"attn", "ffn"}) {
    out.f32(p + "hc_" + which + "_fn", {mix, flat}, out.random({mix, flat}, 1.0f / std::sqrt(static_cast<float>(flat))));
    out.f32(p + "hc_" + which + "_base", {mix}, out.random({mix}, 0.5f));
    out.f32(p + "hc_" + which + "_scale", {3}, out.random({3}, 0.2f, 1.0f));
  }
}

void write_hc_head(ShardedOutput& out, const ModelConfig& c, const std::string& p) {
  const int64_t flat = int64_t{c.hc_mult} * c.dim;
  out.f32(p + "hc_head_fn", {c.hc_mult, flat}, out.random({c.hc_mult, flat}, 1.0f / std::sqrt(static_cast<float>(flat))));
  out.f32(p + "hc_head_base", {c.hc_mult}, out.random({c.hc_mult}, 0.5f));
  out.f32(p + "hc_head_scale", {1}, out.random({1}, 0.2f, 1.0f));
}

const char* kDefaultPreset = R"({
  "vocab_size": 512, "hidden_size": 128, "moe_intermediate_size": 128, "num_hidden_layers": 4,
  "num_hash_layers": 2, "num_nextn_predict_layers": 1, "num_attention_heads": 4,
  "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "scoring_func": "sqrtsoftplus",
  "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "q_lora_rank": 128, "head_dim": 128,
  "qk_rope_head_dim": 64, "rms_norm_eps": 1e-6, "o_groups": 2, "o_lora_rank": 64, "sliding_window": 16,
  "compress_ratios": [0, 4, 16, 0, 0], "compress_rope_theta": 160000.0, "rope_theta": 10000.0,
  "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "beta_fast": 32, "beta_slow": 1},
  "index_n_heads": 4, "index_head_dim": 128, "index_topk": 8, "hc_mult": 4, "hc_sinkhorn_iters": 20,
  "hc_eps": 1e-6, "max_position_embeddings": 4096, "bos_token_id": 0, "eos_token_id": 1
})";

// The shapes of the small golden cases, as changes to the default preset.
const char* kSmallPresetPatch = R"({
  "vocab_size": 1024, "hidden_size": 256, "num_hidden_layers": 6, "num_hash_layers": 3,
  "n_routed_experts": 16, "num_experts_per_tok": 6, "head_dim": 512, "sliding_window": 128,
  "compress_ratios": [0, 0, 4, 128, 4, 128, 0], "index_topk": 16, "max_position_embeddings": 8192,
  "rope_scaling": {"factor": 16.0, "original_max_position_embeddings": 65536}
})";

// The standard benchmark workload: DeepSeek-V4-Flash's shapes scaled down
// to fit these machines (about 4 GB in FP8 blocks and FP4 experts).
const char* kBenchPresetPatch = R"({
  "vocab_size": 129280, "hidden_size": 2048, "moe_intermediate_size": 1024, "num_hidden_layers": 12,
  "num_hash_layers": 3, "num_nextn_predict_layers": 1, "num_attention_heads": 32, "n_routed_experts": 64,
  "num_experts_per_tok": 6, "q_lora_rank": 768, "head_dim": 512, "o_groups": 4, "o_lora_rank": 512,
  "sliding_window": 128, "compress_ratios": [0, 0, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 0],
  "index_n_heads": 32, "index_head_dim": 128, "index_topk": 512, "max_position_embeddings": 65536,
  "rope_scaling": {"factor": 16.0, "original_max_position_embeddings": 65536}
})";

}  // namespace

StatusOr<ModelConfig> synthetic_config(const std::string& preset, const std::string& overrides_json,
                                       const PresetCounts& counts) {
  nlohmann::json j;
  if (preset == "flash" || preset == "pro") {
    j = nlohmann::json::parse(released_config_json(preset));
  } else if (preset == "default" || preset == "small" || preset == "bench") {
    j = nlohmann::json::parse(kDefaultPreset);
    if (preset == "small") j.merge_patch(nlohmann::json::parse(kSmallPresetPatch));
    if (preset == "bench") j.merge_patch(nlohmann::json::parse(kBenchPresetPatch));
  } else if (preset == "v41-flash") {
    return invalid_argument("preset 'v41-flash' is a DeepSeek-V4.1 config (tools/synthetic_v41.h makes it)");
  } else {
    return invalid_argument("unknown preset '" + preset + "' (known: default, small, bench, flash, pro, v41-flash)");
  }
  if (!overrides_json.empty()) {
    nlohmann::json o;
    try {
      o = nlohmann::json::parse(overrides_json);
    } catch (const std::exception& e) {
      return invalid_argument(std::string("--config is not valid JSON: ") + e.what());
    }
    if (!o.is_object()) return invalid_argument("--config must be a JSON object of config.json fields");
    j.merge_patch(o);
  }
  if (counts.layers < 0 || counts.experts < 0 || counts.vocab < 0)
    return invalid_argument("layer, expert and vocabulary counts must be positive");
  try {
    if (counts.layers > 0) {
      // The first layers keep their ratios; the MTP layers keep theirs (the
      // list's last entries).
      const int old_layers = j.at("num_hidden_layers").get<int>(), mtp = j.value("num_nextn_predict_layers", 0);
      const auto ratios = j.at("compress_ratios").get<std::vector<int>>();
      if (counts.layers > old_layers) return invalid_argument("--layers can only shrink the preset's " + std::to_string(old_layers) + " layers");
      std::vector<int> kept(ratios.begin(), ratios.begin() + std::min<size_t>(counts.layers, ratios.size()));
      for (int i = 0; i < mtp && old_layers + i < static_cast<int>(ratios.size()); ++i) kept.push_back(ratios[old_layers + i]);
      j["num_hidden_layers"] = counts.layers;
      j["compress_ratios"] = kept;
      j["num_hash_layers"] = std::min(counts.layers, j.value("num_hash_layers", 0));
    }
    if (counts.experts > 0) {
      j["n_routed_experts"] = counts.experts;
      j["num_experts_per_tok"] = std::min(counts.experts, j.at("num_experts_per_tok").get<int>());
    }
    if (counts.vocab > 0) j["vocab_size"] = counts.vocab;
    if (counts.dspark) {
      // As released: num_nextn_predict_layers stays, the stages are the
      // ratio list's three trailing zeros.
      const int layers = j.at("num_hidden_layers").get<int>(), vocab = j.at("vocab_size").get<int>();
      auto ratios = j.at("compress_ratios").get<std::vector<int>>();
      ratios.resize(layers);
      ratios.insert(ratios.end(), 3, 0);
      j["compress_ratios"] = ratios;
      std::vector<int> taps;
      for (int l = std::max(0, layers - 3); l < layers; ++l) taps.push_back(l);
      j["dspark_block_size"] = 5;
      j["dspark_markov_rank"] = 256;
      j["dspark_noise_token_id"] = std::min(128799, vocab - 1);
      j["dspark_target_layer_ids"] = taps;
    }
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("preset '") + preset + "': " + e.what());
  }
  return parse_model_config(j.dump(), "preset '" + preset + "'");
}

Status write_synthetic_checkpoint(const ModelConfig& c, const SyntheticOptions& opt, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return internal_error("cannot create directory '" + dir + "': " + ec.message());
  if (opt.weights == SyntheticWeights::kFp8 && (c.dim % 128 || c.q_lora_rank % 128 || c.moe_inter_dim % 128 ||
                                                 (int64_t{c.o_groups} * c.o_lora_rank) % 128))
    return invalid_argument("fp8 weights need hidden_size, q_lora_rank, moe_intermediate_size and o_groups*o_lora_rank divisible by 128");
  if (opt.dspark_drafts_agree && !c.has_dspark())
    return invalid_argument("a drafter that agrees needs a DSpark checkpoint (--dspark)");
  ShardedOutput out(opt, c, dir);
  const Floats embed = out.random({c.vocab_size, c.dim}, 1.0f);
  out.bf16("embed.weight", {c.vocab_size, c.dim}, embed);
  for (int i = 0; i < c.n_layers; ++i) write_block(out, c, "layers." + std::to_string(i) + ".", i);
  out.bf16("norm.weight", {c.dim}, out.random({c.dim}, 0.1f, 1.0f));
  if (opt.dspark_drafts_agree) {
    // The streams stay the token's embedding e_t (every block silenced,
    // identical copies mixed by doubly stochastic combs), so logit v is
    // about margin * <e_v, e_t> / dim: margin for v = t, near 0 otherwise.
    Floats head = embed;
    for (float& v : head) v *= kRepeatMargin / static_cast<float>(c.dim);
    out.bf16("head.weight", {c.vocab_size, c.dim}, head);
  } else {
    out.bf16("head.weight", {c.vocab_size, c.dim},
             out.random({c.vocab_size, c.dim}, 1.0f / std::sqrt(static_cast<float>(c.dim))));
  }
  write_hc_head(out, c, "");
  for (int i = 0; i < c.n_mtp_layers; ++i) {
    const std::string p = "mtp." + std::to_string(i) + ".";
    write_block(out, c, p, c.n_layers + i);
    if (opt.mtp_copies_last_block) {
      // The block sees the next token's embedding (as the last block sees
      // that token's stream), the main streams do not enter.
      out.identity_linear(p + "e_proj", c.dim, 1.0f);
      out.identity_linear(p + "h_proj", c.dim, 0.0f);
    } else {
      out.linear(p + "e_proj", c.dim, c.dim, 1);
      out.linear(p + "h_proj", c.dim, c.dim, 1);
    }
    for (const char* n : {"enorm", "hnorm", "norm"}) out.bf16(p + n + ".weight", {c.dim}, out.random({c.dim}, 0.1f, 1.0f));
    write_hc_head(out, c, p);
  }
  if (c.has_dspark()) {
    // The drafter (model/dspark.h): stage blocks (window only, score
    // routed), the taps' projection on stage 0, the head pieces on the last.
    const int64_t taps = int64_t{c.dspark_taps()} * c.dim, rank = c.dspark_markov_rank;
    const int fp8 = opt.weights == SyntheticWeights::kFp8 ? 1 : 0;
    for (int s = 0; s < c.dspark_stages; ++s) write_block(out, c, "mtp." + std::to_string(s) + ".", c.n_layers + s);
    out.linear("mtp.0.main_proj", c.dim, taps, fp8);
    out.bf16("mtp.0.main_norm.weight", {c.dim}, out.random({c.dim}, 0.1f, 1.0f));
    const std::string last = "mtp." + std::to_string(c.dspark_stages - 1) + ".";
    out.bf16(last + "norm.weight", {c.dim}, out.random({c.dim}, 0.1f, 1.0f));
    write_hc_head(out, c, last);
    if (opt.dspark_drafts_agree) {
      // Rows u_t of norm sqrt(rank): the bias w2 . w1[prev] = strength *
      // <u_v, u_prev> / rank is the strength at v = prev and about
      // strength / sqrt(rank) elsewhere, far above the noise rows' logits.
      Floats u = out.random({c.vocab_size, rank}, 1.0f);
      for (int64_t t = 0; t < c.vocab_size; ++t) {
        double sq = 0.0;
        for (int64_t r = 0; r < rank; ++r) sq += double{u[t * rank + r]} * u[t * rank + r];
        const float scale = static_cast<float>(std::sqrt(rank / std::max(sq, 1e-12)));
        for (int64_t r = 0; r < rank; ++r) u[t * rank + r] *= scale;
      }
      constexpr float kRepeatStrength = 48.0f;
      Floats w2 = u;
      for (float& v : w2) v *= kRepeatStrength / static_cast<float>(rank);
      out.bf16(last + "markov_head.markov_w1.weight", {c.vocab_size, rank}, u);
      out.bf16(last + "markov_head.markov_w2.weight", {c.vocab_size, rank}, w2);
    } else {
      out.bf16(last + "markov_head.markov_w1.weight", {c.vocab_size, rank}, out.random({c.vocab_size, rank}, 1.0f));
      out.bf16(last + "markov_head.markov_w2.weight", {c.vocab_size, rank},
               out.random({c.vocab_size, rank}, 1.0f / std::sqrt(static_cast<float>(rank))));
    }
    out.bf16(last + "confidence_head.proj.weight", {1, c.dim + rank},
             out.random({1, c.dim + rank}, 1.0f / std::sqrt(static_cast<float>(c.dim + rank))));
  }
  DSV4_RETURN_IF_ERROR(out.write());
  std::ofstream cfg(dir + "/config.json");
  cfg << model_config_json(c) << "\n";
  if (!cfg) return internal_error("cannot write " + dir + "/config.json");
  return Status::Ok();
}

}  // namespace dsv4
