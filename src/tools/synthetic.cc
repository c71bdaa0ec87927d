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
#include "checkpoint/safetensors_writer.h"

namespace dsv4 {
namespace {

// A vector whose elements start uninitialized: the parallel fills write
// every value (and take the first-touch page faults on every thread).
template <class T>
struct NoInit : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = NoInit<U>;
  };
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) ::new (static_cast<void*>(p)) U;
    else ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using Floats = std::vector<float, NoInit<float>>;

// splitmix64, and normals as the sum of four uniforms (Irwin-Hall, scaled
// to unit variance): the same numbers on every platform, and cheap.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  // Approximately standard normal (within +-3.46), from one draw.
  float normal() {
    const uint64_t r = next();
    const uint32_t sum = (r & 0xFFFF) + (r >> 16 & 0xFFFF) + (r >> 32 & 0xFFFF) + (r >> 48);
    return (static_cast<float>(sum) * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
  }

 private:
  uint64_t state_;
};

// Random tensors are drawn in chunks of this many values, each chunk from
// its own stream (seed, tensor number, chunk): the same numbers however
// many threads draw them.
constexpr int64_t kRandomChunk = 1 << 14;
// SyntheticOptions::dspark_drafts_agree: the logit of repeating the token
// read, the others near 0 (greedy repeats; at temperature 1 with top-k 3
// the repeat has about two thirds of the mass).
constexpr float kRepeatMargin = 2.0f;

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Distributes tensors over shard writers and records the weight map.
class ShardedOutput {
 public:
  ShardedOutput(const SyntheticOptions& o, const ModelConfig& c) : opt_(o), rng_(o.seed), writers_(std::max(1, o.shards)), cfg_(c) {}

  // The shard a tensor goes to follows its layer, so a layer stays in one file.
  int shard_of(const std::string& name) const {
    if (writers_.size() == 1) return 0;
    int layer = -1;
    if (name.rfind("layers.", 0) == 0) layer = std::atoi(name.c_str() + 7);
    if (name.rfind("mtp.", 0) == 0) layer = cfg_.n_layers;
    if (layer < 0) return 0;
    return static_cast<int>((static_cast<int64_t>(layer) * writers_.size()) / (cfg_.n_layers + 1));
  }

  Floats random(const std::vector<int64_t>& shape, float std, float mean = 0.0f) {
    Floats v(numel(shape));
    const uint64_t tensor = ++tensors_;
    const int64_t n = static_cast<int64_t>(v.size()), chunks = (n + kRandomChunk - 1) / kRandomChunk;
    parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        Rng rng(opt_.seed ^ (tensor << 32) ^ static_cast<uint64_t>(c) * 0xD1B54A32D192ED03ull);
        for (int64_t i = c * kRandomChunk; i < std::min(n, (c + 1) * kRandomChunk); ++i) v[i] = mean + std * rng.normal();
      }
    });
    return v;
  }

  void f32(const std::string& name, const std::vector<int64_t>& shape, const Floats& v) {
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    put(name, DType::kF32, shape, std::move(bytes));
  }

  void bf16(const std::string& name, const std::vector<int64_t>& shape, const Floats& v) {
    std::vector<uint8_t> bytes(v.size() * 2);
    parallel_for(static_cast<int64_t>(v.size()), 1 << 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        uint16_t b = f32_to_bf16(v[i]);
        std::memcpy(&bytes[2 * i], &b, 2);
      }
    });
    put(name, DType::kBF16, shape, std::move(bytes));
  }

  void i64(const std::string& name, const std::vector<int64_t>& shape, const std::vector<int64_t>& v) {
    std::vector<uint8_t> bytes(v.size() * 8);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    put(name, DType::kI64, shape, std::move(bytes));
  }

  // prefix.weight [out, in] (+ prefix.scale), random with std 1/sqrt(in).
  // kind: 0 dense BF16, 1 FP8 128x128 blocks, 2 FP4 per-32 (routed experts).
  void linear(const std::string& prefix, int64_t out, int64_t in, int kind) {
    Floats w = random({out, in}, 1.0f / std::sqrt(static_cast<float>(in)));
    if (silenced(prefix)) std::fill(w.begin(), w.end(), 0.0f);
    linear_of(prefix, out, in, kind, std::move(w));
  }

  // With mtp_copies_last_block the blocks before the last add nothing to
  // the streams (their output projections are zero), so the last block and
  // the MTP block both see token embeddings.
  // With dspark_drafts_agree, every block of the model and the drafter.
  bool silenced(const std::string& prefix) const {
    auto ends = [&](const std::string& tail) {
      return prefix.size() >= tail.size() && prefix.compare(prefix.size() - tail.size(), tail.size(), tail) == 0;
    };
    const bool output = ends(".wo_b") || ends(".w2");
    if (opt_.dspark_drafts_agree) return output && (prefix.rfind("layers.", 0) == 0 || prefix.rfind("mtp.", 0) == 0);
    if (!opt_.mtp_copies_last_block || prefix.rfind("layers.", 0) != 0) return false;
    if (std::atoi(prefix.c_str() + 7) >= cfg_.n_layers - 1) return false;
    return output;
  }

  // prefix.weight = diagonal * I [n, n], FP8 blocks with fp8 weights.
  void identity_linear(const std::string& prefix, int64_t n, float diagonal) {
    Floats w(n * n, 0.0f);
    for (int64_t i = 0; i < n; ++i) w[i * n + i] = diagonal;
    linear_of(prefix, n, n, 1, std::move(w));
  }

  void linear_of(const std::string& prefix, int64_t out, int64_t in, int kind, Floats w) {
    if (opt_.weights == SyntheticWeights::kBf16 || kind == 0) {
      bf16(prefix + ".weight", {out, in}, w);
      return;
    }
    if (kind == 1) {
      const int64_t so = (out + 127) / 128, si = (in + 127) / 128;
      std::vector<uint8_t> q(out * in), scale(so * si);
      parallel_for(so, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t bo = b0; bo < b1; ++bo)
        for (int64_t bi = 0; bi < si; ++bi) {
          float amax = 1e-12f;
          for (int64_t r = bo * 128; r < std::min(out, bo * 128 + 128); ++r)
            for (int64_t c = bi * 128; c < std::min(in, bi * 128 + 128); ++c) amax = std::fmax(amax, std::fabs(w[r * in + c]));
          float sc = pow2_ceil(amax / kE4M3Max);
          scale[bo * si + bi] = static_cast<uint8_t>(std::ilogb(sc) + 127);
          for (int64_t r = bo * 128; r < std::min(out, bo * 128 + 128); ++r)
            for (int64_t c = bi * 128; c < std::min(in, bi * 128 + 128); ++c) q[r * in + c] = f32_to_e4m3(w[r * in + c] / sc);
        }
      });
      put(prefix + ".weight", DType::kF8E4M3, {out, in}, std::move(q));
      put(prefix + ".scale", DType::kF8E8M0, {so, si}, std::move(scale));
    } else {
      std::vector<uint8_t> q(out * in / 2, 0), scale(out * in / 32);
      parallel_for(out, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t b = 0; b < in / 32; ++b) {
          float amax = 1e-12f;
          for (int64_t c = b * 32; c < b * 32 + 32; ++c) amax = std::fmax(amax, std::fabs(w[r * in + c]));
          float sc = pow2_ceil(amax / kE2M1Max);
          scale[r * (in / 32) + b] = static_cast<uint8_t>(std::ilogb(sc) + 127);
          for (int64_t c = b * 32; c < b * 32 + 32; ++c) {
            uint8_t nib = f32_to_e2m1(w[r * in + c] / sc);
            q[r * (in / 2) + c / 2] |= (c & 1) ? static_cast<uint8_t>(nib << 4) : nib;
          }
        }
      });
      put(prefix + ".weight", DType::kI8, {out, in / 2}, std::move(q));
      put(prefix + ".scale", DType::kF8E8M0, {out, in / 32}, std::move(scale));
    }
  }

  Rng& rng() { return rng_; }

  // Every tensor goes out here. With mtp_copies_last_block, an MTP tensor
  // whose counterpart (the last block's, or the main head's for the MTP
  // head) has the same shape takes the counterpart's bytes.
  void put(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    if (opt_.mtp_copies_last_block) {
      const std::string last = "layers." + std::to_string(cfg_.n_layers - 1) + ".";
      if (name.rfind(last, 0) == 0 || name.rfind("hc_head_", 0) == 0 || name == "norm.weight") {
        saved_[name] = {dtype, shape, bytes};
      } else if (name.rfind("mtp.", 0) == 0) {
        const std::string rest = name.substr(name.find('.', 4) + 1);  // after "mtp.N."
        const bool head = rest.rfind("hc_head_", 0) == 0 || rest == "norm.weight";
        auto it = saved_.find(head ? rest : last + rest);
        if (it != saved_.end() && it->second.shape == shape && it->second.dtype == dtype) bytes = it->second.bytes;
      }
    }
    writers_[shard_of(name)].add(name, dtype, std::move(shape), std::move(bytes));
  }

  Status write(const std::string& dir) {
    if (writers_.size() == 1) return writers_[0].write(dir + "/model.safetensors");
    nlohmann::json index;
    index["metadata"] = {{"total_size", 0}};
    uint64_t total = 0;
    for (size_t i = 0; i < writers_.size(); ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, writers_.size());
      DSV4_RETURN_IF_ERROR(writers_[i].write(dir + "/" + name));
      for (const auto& t : writers_[i].names()) index["weight_map"][t] = name;
      total += writers_[i].total_bytes();
    }
    index["metadata"]["total_size"] = total;
    std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2);
    return Status::Ok();
  }

 private:
  struct Saved {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  const SyntheticOptions& opt_;
  Rng rng_;               // the sequential draws (hash routing tables)
  uint64_t tensors_ = 0;  // random tensors drawn so far
  std::map<std::string, Saved> saved_;
  std::vector<SafetensorsWriter> writers_;
  const ModelConfig& cfg_;
};

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
  } else {
    return invalid_argument("unknown preset '" + preset + "' (known: default, small, bench, flash, pro)");
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
  ShardedOutput out(opt, c);
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
  DSV4_RETURN_IF_ERROR(out.write(dir));
  std::ofstream cfg(dir + "/config.json");
  cfg << model_config_json(c) << "\n";
  if (!cfg) return internal_error("cannot write " + dir + "/config.json");
  return Status::Ok();
}

}  // namespace dsv4
