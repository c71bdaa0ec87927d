#include "tools/capacity_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

#include "kernels/kernels.h"
#include "model/cache_geometry.h"
#include "model/v41_linear.h"
#include "model/weights.h"

namespace dsv4 {
namespace {

using kernels::PanelFormat;

// Stored formats of a released checkpoint's linears.
enum class Stored { kFp8, kFp4, kBf16, kDense };

// One rank's share of the model, as the loader holds it
// (checkpoint/weight_loader.cc): each tensor's bytes, how they are held and
// what reads them per token.
class WeightWalk {
 public:
  using Visit = std::function<void(HeldAs, int64_t bytes, LinearKind kind, bool is_linear)>;
  WeightWalk(const ModelConfig& c, PlanWeights weights, int tp, int ep, const Visit& visit)
      : c_(c), weights_(weights), tp_(tp), ep_(ep), visit_(visit) {}

  void run() {
    // Embedding (kept as stored, BF16) and head by vocabulary.
    visit_(HeldAs::kBf16, share(c_.vocab_size) * c_.dim * 2, LinearKind::kMain, false);
    for (int i = 0; i < c_.n_layers; ++i) block(i, LinearKind::kMain, LinearKind::kRoutedExpert);
    vec(c_.dim);
    linear(Stored::kBf16, share(c_.vocab_size), c_.dim, LinearKind::kHead);
    hc_head(LinearKind::kMain);
    for (int i = 0; i < c_.n_mtp_layers; ++i) {
      block(c_.n_layers + i, LinearKind::kMtp, LinearKind::kMtp);
      linear(Stored::kFp8, c_.dim, c_.dim, LinearKind::kMtp);  // e_proj
      linear(Stored::kFp8, c_.dim, c_.dim, LinearKind::kMtp);  // h_proj
      vec(3 * int64_t{c_.dim});                                // enorm, hnorm, norm
      hc_head(LinearKind::kMtp);
    }
  }

 private:
  int64_t share(int64_t n) const { return n / tp_; }
  void vec(int64_t n) { visit_(HeldAs::kF32, 4 * n, LinearKind::kMain, false); }

  void linear(Stored s, int64_t rows, int64_t in, LinearKind kind) {
    if (weights_ == PlanWeights::kBf16 && s != Stored::kDense) s = Stored::kBf16;
    switch (s) {
      case Stored::kFp8:
      case Stored::kFp4: {
        const PanelFormat f = s == Stored::kFp8 ? PanelFormat::kFp8 : PanelFormat::kFp4;
        visit_(s == Stored::kFp8 ? HeldAs::kFp8 : HeldAs::kFp4,
               kernels::packed_code_bytes(f, rows, in) + kernels::packed_scale_bytes(f, rows, in), kind, true);
        break;
      }
      case Stored::kBf16:
        visit_(HeldAs::kBf16, kernels::packed_code_bytes(PanelFormat::kBf16, rows, in), kind, true);
        break;
      case Stored::kDense: visit_(HeldAs::kF32, 4 * kernels::packed_floats(rows, in), kind, true); break;
    }
  }

  void hc_head(LinearKind kind) {
    linear(Stored::kDense, c_.hc_mult, int64_t{c_.hc_mult} * c_.dim, kind);
    vec(c_.hc_mult + 1);
  }

  void compressor(int ratio, int64_t head_dim, LinearKind kind) {
    const int64_t width = (ratio == 4 ? 2 : 1) * head_dim;
    linear(Stored::kBf16, share(width), c_.dim, kind);  // wkv
    linear(Stored::kBf16, share(width), c_.dim, kind);  // wgate
    vec(ratio * width + head_dim);                      // ape, norm
  }

  void block(int layer, LinearKind kind, LinearKind routed) {
    const int64_t hd = c_.head_dim, heads = c_.n_heads, dim = c_.dim, G = c_.o_groups, olr = c_.o_lora_rank;
    const int ratio = c_.compress_ratio(layer);
    vec(share(heads) + c_.q_lora_rank + hd);  // attn_sink, q_norm, kv_norm
    linear(Stored::kFp8, share(c_.q_lora_rank), dim, kind);
    linear(Stored::kFp8, share(heads * hd), c_.q_lora_rank, kind);
    linear(Stored::kFp8, share(hd), dim, kind);
    const int64_t groups = std::max<int64_t>(1, G / tp_);
    for (int64_t g = 0; g < groups; ++g) linear(Stored::kFp8, olr, heads * hd / G, kind);  // wo_a
    linear(Stored::kFp8, share(dim), G * olr, kind);                                       // wo_b
    if (ratio) {
      compressor(ratio, hd, kind);
      if (ratio == 4) {
        const int64_t iq = int64_t{c_.index_n_heads} * c_.index_head_dim;
        linear(Stored::kFp8, share(iq), c_.q_lora_rank, kind);
        linear(Stored::kBf16, share(c_.index_n_heads), dim, kind);
        compressor(ratio, c_.index_head_dim, kind);
      }
    }
    linear(Stored::kDense, c_.n_routed_experts, dim, kind);  // the router gate
    if (c_.is_hash_layer(layer)) visit_(HeldAs::kF32, 4 * int64_t{c_.vocab_size} * c_.n_activated_experts, kind, false);
    else vec(c_.n_routed_experts);
    const int64_t inter = c_.moe_inter_dim;
    for (int e = 0; e < c_.n_routed_experts / ep_; ++e) {
      linear(Stored::kFp4, inter, dim, routed);
      linear(Stored::kFp4, dim, inter, routed);
      linear(Stored::kFp4, inter, dim, routed);
    }
    linear(Stored::kFp8, share(inter), dim, kind);
    linear(Stored::kFp8, share(dim), inter, kind);
    linear(Stored::kFp8, share(inter), dim, kind);
    vec(2 * dim);  // attn_norm, ffn_norm
    for (int i = 0; i < 2; ++i) {  // hc_attn, hc_ffn
      linear(Stored::kDense, c_.mix_hc(), int64_t{c_.hc_mult} * dim, kind);
      vec(c_.mix_hc() + 3);
    }
  }

  const ModelConfig& c_;
  const PlanWeights weights_;
  const int tp_, ep_;
  const Visit& visit_;
};

// DeepSeek-V4.1's share per rank, as checkpoint/v41_loader.cc holds it
// (each linear in its stored format: V41Linear::held_bytes): by TP the
// query heads, the output groups and the output features of the linears
// whose features divide into whole blocks (32-row tiles for FP8), routed
// experts by EP; the embedding, the router, the indexer's wk and the
// drafter's heads whole. The Engram tables are not a rank's: they are read
// by row, one copy per machine (engram()).
class V41WeightWalk {
 public:
  using Visit = WeightWalk::Visit;
  using Kind = V41Linear::Kind;
  // packed: fast numerics (V41Linear::pack_for_fast), every linear a
  // forward multiplies by in panels.
  V41WeightWalk(const ModelConfig& c, PlanWeights weights, int tp, int ep, bool packed, const Visit& visit)
      : c_(c), weights_(weights), tp_(tp), ep_(ep), packed_(packed), visit_(visit) {}

  void run() {
    const int64_t dim = c_.dim, V = c_.vocab_size;
    visit_(HeldAs::kBf16, V41Linear::held_bytes(Kind::kBf16, V, dim), LinearKind::kMain, false);  // embed
    for (int i = 0; i < c_.n_layers; ++i) block(i, LinearKind::kMain, LinearKind::kRoutedExpert);
    vec(dim);
    columns(Kind::kBf16, V, dim, LinearKind::kHead);
    if (!c_.has_dspark()) return;
    const int64_t R = c_.dspark_markov_rank;
    columns(Kind::kFp8, dim, int64_t{c_.dspark_taps()} * dim, LinearKind::kMtp);  // main_proj
    vec(2 * dim);                                                                // main_norm, norm
    for (int s = 0; s < c_.dspark_stages; ++s) block(c_.n_layers + s, LinearKind::kMtp, LinearKind::kMtp);
    linear(Kind::kBf16, V, R, LinearKind::kMtp, false);  // markov_head.embed (read by row)
    linear(Kind::kBf16, V, R, LinearKind::kMtp);        // markov_head.head
    linear(Kind::kBf16, 1, dim + R, LinearKind::kMtp);  // confidence_head.proj
  }

  // The Engram tables: e4m3 rows and an e8m0 scale per 32 values.
  static int64_t engram_bytes(const ModelConfig& c) {
    int64_t n = 0;
    for (int64_t rows : c.engram.num_embeddings) n += rows * (c.engram.head_dim + c.engram.head_dim / V41Linear::kBlock);
    return n;
  }

 private:
  int64_t share(int64_t n) const { return n / tp_; }
  void vec(int64_t n) { visit_(HeldAs::kF32, 4 * n, LinearKind::kMain, false); }
  static HeldAs held_as(Kind k) {
    switch (k) {
      case Kind::kFp8: return HeldAs::kFp8;
      case Kind::kFp4: return HeldAs::kFp4;
      case Kind::kBf16: return HeldAs::kBf16;
      case Kind::kF32: break;
    }
    return HeldAs::kF32;
  }
  // packable: not read by row, and multiplied by whole panels.
  void linear(Kind k, int64_t out, int64_t in, LinearKind kind, bool packable = true) {
    if (weights_ == PlanWeights::kBf16 && k != Kind::kF32) k = Kind::kBf16;
    visit_(held_as(k), V41Linear::held_bytes(k, out, in, packed_ && packable), kind, true);
  }
  // A linear the loader splits by output features when they divide
  // (TensorReader::columns).
  void columns(Kind k, int64_t out, int64_t in, LinearKind kind) {
    if (weights_ == PlanWeights::kBf16 && k != Kind::kF32) k = Kind::kBf16;
    const int64_t tile = k == Kind::kFp8 ? V41Linear::kBlock : 1;
    const bool split = tp_ > 1 && out % tp_ == 0 && (out / tp_) % tile == 0;
    linear(k, split ? out / tp_ : out, in, kind);
  }
  static bool has(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

  void block(int layer, LinearKind kind, LinearKind routed) {
    const int64_t hd = c_.head_dim, heads = c_.n_heads, dim = c_.dim, G = c_.o_groups, olr = c_.o_lora_rank;
    const bool backbone = layer < c_.n_layers;
    vec(share(heads) + c_.q_lora_rank + hd);  // attn_sink, q_norm, kv_norm
    columns(Kind::kFp8, c_.q_lora_rank, dim, kind);
    linear(Kind::kFp8, share(heads * hd), c_.q_lora_rank, kind);
    columns(Kind::kFp8, hd, dim, kind);
    const int64_t groups = std::max<int64_t>(1, G / tp_);
    // wo_a, FP8 dequantized per row; in panels when a group fills whole ones
    linear(Kind::kFp8, groups * olr, heads * hd / G, kind, olr % kernels::kPanel == 0);
    columns(Kind::kFp8, dim, G * olr, kind);                // wo_b
    const int ratio = c_.compress_ratio(layer);
    const bool kv_source = backbone && has(c_.shared.kv_source_layers, layer);
    if (kv_source) {
      columns(Kind::kBf16, hd, dim, kind);             // compressor.wkv
      if (ratio > 1) columns(Kind::kBf16, hd, dim, kind);  // compressor.wgate
      vec(hd);
    }
    if (backbone && has(c_.shared.index_source_layers, layer)) {
      const int64_t iq = int64_t{c_.index_n_heads} * c_.index_head_dim;
      columns(Kind::kFp8, iq, c_.q_lora_rank, kind);
      columns(Kind::kBf16, c_.index_n_heads, dim, kind);
      if (kv_source) {
        linear(Kind::kBf16, c_.index_head_dim, hd, kind);  // wk
        vec(c_.index_head_dim);
      }
    }
    const int64_t E = !backbone && c_.dspark_n_routed_experts ? c_.dspark_n_routed_experts : c_.n_routed_experts;
    linear(Kind::kBf16, E, dim, kind);  // the router gate
    vec(E);  // bias (gate.bias_vl, for image tokens, is not loaded: no vision tower yet)
    const int64_t inter = c_.moe_inter_dim;
    for (int64_t e = 0; e < E / ep_; ++e)
      for (auto [out, in] : {std::pair{inter, dim}, std::pair{dim, inter}, std::pair{inter, dim}})
        linear(Kind::kFp4, out, in, routed);
    columns(Kind::kFp8, inter, dim, kind);
    columns(Kind::kFp8, dim, inter, kind);
    columns(Kind::kFp8, inter, dim, kind);
    vec(2 * dim);  // attn_norm, ffn_norm
    for (int i = 0; i < 2; ++i) {  // hc_attn, hc_ffn: packed as V4's
      visit_(HeldAs::kF32, 4 * kernels::packed_floats(c_.mix_hc(), int64_t{c_.hc_mult} * dim), kind, true);
      vec(c_.mix_hc() + 3);
    }
    if (backbone && has(c_.engram.layer_ids, layer)) {  // the projection; its table is engram_bytes
      const EngramConfig& e = c_.engram;
      columns(Kind::kFp8, dim * (c_.hc_mult + 1), int64_t{e.hash_columns()} * e.head_dim, kind);
      vec(int64_t{c_.hc_mult} * dim);  // q_weight * k_weight
    }
  }

  const ModelConfig& c_;
  const PlanWeights weights_;
  const int tp_, ep_;
  const bool packed_;
  const Visit& visit_;
};

// The walk of the config's family.
void walk_weights(const ModelConfig& c, const PlanOptions& o, int tp, int ep, const WeightWalk::Visit& visit) {
  const PlanWeights weights = o.weights;
  if (c.family == ModelFamily::kV41)
    V41WeightWalk(c, weights, tp, ep, o.numerics == kernels::Numerics::kFast, visit).run();
  else WeightWalk(c, weights, tp, ep, visit).run();
}

std::string gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", bytes / 1073741824.0);
  return b;
}

}  // namespace

const char* held_as_name(HeldAs h) {
  switch (h) {
    case HeldAs::kFp8: return "FP8 blocks";
    case HeldAs::kFp4: return "FP4 experts";
    case HeldAs::kBf16: return "BF16";
    case HeldAs::kF32: return "F32";
    case HeldAs::kNum: break;
  }
  return "?";
}

StatusOr<CapacityPlan> plan_capacity(const ModelConfig& c, const PlanOptions& o) {
  CapacityPlan p;
  p.config = c;
  DSV4_ASSIGN_OR_RETURN(p.topology, Topology::make(o.topology, c));
  const Topology& t = p.topology;
  p.max_model_len = o.max_model_len > 0 ? o.max_model_len : c.max_position_embeddings;
  if (p.max_model_len > c.max_position_embeddings)
    return invalid_argument("max-model-len " + std::to_string(p.max_model_len) + " exceeds the model's " +
                            std::to_string(c.max_position_embeddings) + " positions");
  // Rank 0's weights, and every rank's (o_groups < tp gives every rank the
  // same share as rank 0; the rest divides evenly).
  WeightWalk::Visit by_format = [&](HeldAs h, int64_t bytes, LinearKind, bool) {
    p.rank_weights[static_cast<int>(h)] += bytes;
    p.rank_weight_bytes += bytes;
  };
  walk_weights(c, o, t.tp, t.ep, by_format);
  p.total_weight_bytes = p.rank_weight_bytes * t.world;
  if (c.family == ModelFamily::kV41) p.engram_bytes = V41WeightWalk::engram_bytes(c);
  // What a batch-1 decode token reads: one copy of the main model, the
  // experts it activates and the head (not the MTP block, not the
  // embedding table): the same sum as dsv4 bench's roofline.
  WeightWalk::Visit decode = [&](HeldAs, int64_t bytes, LinearKind kind, bool is_linear) {
    if (!is_linear) return;
    if (kind == LinearKind::kMain || kind == LinearKind::kHead) p.decode_bytes_per_token += bytes;
    if (kind == LinearKind::kRoutedExpert)
      p.decode_bytes_per_token += static_cast<double>(bytes) * c.n_activated_experts / c.n_routed_experts;
  };
  walk_weights(c, o, 1, 1, decode);
  // V4.1: and its Engram rows (hash columns per Engram layer).
  for (size_t i = 0; i < c.engram.layer_ids.size(); ++i)
    p.decode_bytes_per_token += static_cast<double>(c.engram.hash_columns()) * (c.engram.head_dim + c.engram.head_dim / 32);
  p.bandwidth = o.bandwidth;

  // The KV cache: the process's budget split over its ranks, each rank of a
  // DP group holding the same pages (as LocalExecutor sizes it).
  KvCacheOptions cache = o.cache;
  const CacheGeometry geometry = CacheGeometry::of(c, cache.max_draft_tokens);
  DSV4_ASSIGN_OR_RETURN(PageLayout layout, PageLayout::of(geometry, cache.block_size));
  p.kv_bytes_per_token = kv_bytes_per_token(layout, p.max_model_len);
  p.kv_bytes_per_token_4k = kv_bytes_per_token(layout, std::min<int64_t>(4096, p.max_model_len));
  if (o.kv_cache_bytes > 0) {
    p.kv_budget_bytes = o.kv_cache_bytes;
  } else if (o.memory_bytes > 0) {
    // Activations, scratch and the runtime besides weights and KV: 5% of
    // the memory, at least 2 GiB.
    p.headroom_bytes = std::max<int64_t>(int64_t{2} << 30, o.memory_bytes / 20);
    p.memory_bytes = o.memory_bytes;
    p.kv_budget_bytes = o.memory_bytes - p.total_weight_bytes - p.engram_bytes - p.headroom_bytes;
    if (p.kv_budget_bytes <= 0) {
      p.fits = false;
      p.kv_budget_bytes = 0;
    }
  }
  if (p.kv_budget_bytes > 0) {
    DSV4_ASSIGN_OR_RETURN(p.kv, KvCacheManager::plan(geometry, cache, p.kv_budget_bytes / t.world));
    p.tokens_per_group = p.kv.token_capacity;
    p.requests_per_group =
        p.kv.token_capacity < 0 ? cache.max_num_seqs
                                : std::min<int64_t>(cache.max_num_seqs, p.kv.token_capacity / p.max_model_len);
  }
  return p;
}

std::string CapacityPlan::report() const {
  std::ostringstream s;
  const Topology& t = topology;
  s << "model: " << config.summary() << "\n";
  s << "layout: " << t.describe() << ", max-model-len " << max_model_len << "\n";
  s << "weights per rank (resident, as loaded):\n";
  for (int h = 0; h < static_cast<int>(HeldAs::kNum); ++h)
    if (rank_weights[h]) s << "  " << held_as_name(static_cast<HeldAs>(h)) << ": " << gib(rank_weights[h]) << "\n";
  s << "  total " << gib(rank_weight_bytes) << " per rank, " << gib(total_weight_bytes) << " for all " << t.world
    << " ranks\n";
  if (engram_bytes)
    s << "Engram tables: " << gib(engram_bytes)
      << " once per machine (FP8 rows with E8M0 scales, read by row, shared by its ranks)\n";
  if (config.family == ModelFamily::kV41 && config.vision_n_layers > 0)
    s << "vision tower: not loaded (image inputs are not served by this build)\n";
  char line[256];
  std::snprintf(line, sizeof line, "KV cache: %.0f bytes per token at %lld tokens of context (%.0f at 4K), per DP group\n",
                kv_bytes_per_token, static_cast<long long>(max_model_len), kv_bytes_per_token_4k);
  s << line;
  if (!fits)
    s << "  DOES NOT FIT: the weights (" << gib(total_weight_bytes + engram_bytes) << ") and " << gib(headroom_bytes)
      << " of headroom exceed the " << gib(memory_bytes) << " of memory\n";
  if (kv_budget_bytes > 0) {
    s << "  budget " << gib(kv_budget_bytes);
    if (headroom_bytes) s << " (memory - weights - " << gib(headroom_bytes) << " headroom)";
    s << ": " << gib(kv.bytes) << " on each of the " << t.world << " ranks\n";
    if (tokens_per_group < 0) {
      s << "  no compressed layers: window rings only\n";
    } else {
      s << "  " << tokens_per_group << " tokens of history per DP group (" << tokens_per_group * t.dp
        << " in all), " << requests_per_group << " requests of " << max_model_len << " tokens at once per group ("
        << requests_per_group * t.dp << " in all)\n";
    }
  }
  std::snprintf(line, sizeof line, "decode: a token reads %.2f GiB of weights at batch 1", decode_bytes_per_token / 1073741824.0);
  s << line;
  if (bandwidth > 0) {
    std::snprintf(line, sizeof line, " -> roofline %.1f tok/s per sequence at %.0f GB/s", bandwidth / decode_bytes_per_token,
                  bandwidth / 1e9);
    s << line;
  }
  s << "\n";
  return s.str();
}

StatusOr<int64_t> parse_byte_size(const std::string& text, bool decimal) {
  double v = 0;
  char unit[8] = {};
  if (std::sscanf(text.c_str(), "%lf%7s", &v, unit) < 1 || v < 0)
    return invalid_argument("'" + text + "' is not a size (e.g. 512G, 384GiB, 400G)");
  std::string u(unit);
  if (!u.empty() && (u.back() == 'B' || u.back() == 'b')) u.pop_back();
  if (u.size() == 2 && u[1] == 'i') u.pop_back();
  const bool binary = !decimal || std::string(unit).find('i') != std::string::npos;
  const double k = binary ? 1024.0 : 1000.0;
  double mult = 1;
  if (u.empty()) mult = 1;
  else if (u == "K" || u == "k") mult = k;
  else if (u == "M" || u == "m") mult = k * k;
  else if (u == "G" || u == "g") mult = k * k * k;
  else if (u == "T" || u == "t") mult = k * k * k * k;
  else return invalid_argument("'" + text + "' has an unknown unit (K, M, G, T)");
  return static_cast<int64_t>(v * mult);
}

}  // namespace dsv4
