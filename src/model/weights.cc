#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "model/checkpoint.h"

namespace dsv4 {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Reads tensors by name with shape and dtype checks; every error names the
// tensor and the file it came from.
class Loader {
 public:
  Loader(const Checkpoint& ckpt, const LoadProgress& progress, const ExpertShard& experts, const TensorShard& heads)
      : ckpt_(ckpt), progress_(progress), experts_(experts), heads_(heads) {}
  const ExpertShard& experts() const { return experts_; }
  const TensorShard& heads() const { return heads_; }

  StatusOr<const TensorInfo*> tensor(const std::string& name, const std::vector<int64_t>& shape) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(name));
    loaded_ += t->nbytes;
    if (progress_) progress_(loaded_, ckpt_.total_bytes());
    if (t->shape != shape) {
      return invalid_argument("tensor '" + name + "' in " + *t->file + " has shape " + t->shape_string() +
                              ", expected " + shape_str(shape));
    }
    return t;
  }

  Status wrong_dtype(const TensorInfo* t, const char* expected) {
    return invalid_argument("tensor '" + t->name + "' in " + *t->file + " has dtype " + dtype_name(t->dtype) +
                            ", expected " + expected);
  }

  StatusOr<std::vector<float>> floats(const std::string& name, const std::vector<int64_t>& shape) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, tensor(name, shape));
    std::vector<float> out(t->numel());
    DSV4_RETURN_IF_ERROR(to_f32(t, out.data()));
    return out;
  }

  StatusOr<EmbeddingTable> embedding(const std::string& name, int64_t rows, int64_t dim) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, tensor(name, {rows, dim}));
    EmbeddingTable e;
    e.rows = rows;
    e.dim = dim;
    if (t->dtype == DType::kBF16) {
      e.bf16.resize(rows * dim);
      std::memcpy(e.bf16.data(), t->data, 2 * rows * dim);
    } else {
      e.f32.resize(rows * dim);
      DSV4_RETURN_IF_ERROR(to_f32(t, e.f32.data()));
    }
    return e;
  }

  StatusOr<std::vector<int32_t>> ints(const std::string& name, const std::vector<int64_t>& shape, int64_t limit) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, tensor(name, shape));
    std::vector<int32_t> out(t->numel());
    for (int64_t i = 0; i < t->numel(); ++i) {
      int64_t v;
      if (t->dtype == DType::kI64) {
        std::memcpy(&v, t->data + 8 * i, 8);
      } else if (t->dtype == DType::kI32) {
        int32_t v32;
        std::memcpy(&v32, t->data + 4 * i, 4);
        v = v32;
      } else {
        return wrong_dtype(t, "I32 or I64");
      }
      if (v < 0 || v >= limit) {
        return invalid_argument("tensor '" + name + "' in " + *t->file + " holds " + std::to_string(v) +
                                " at element " + std::to_string(i) + ", outside [0, " + std::to_string(limit) + ")");
      }
      out[i] = static_cast<int32_t>(v);
    }
    return out;
  }

  // E8M0 scales the kernels can apply by an exponent addition (every real
  // checkpoint's are; 2^-117..2^118).
  Status check_scales(const TensorInfo* s, const std::string& name) {
    for (int64_t i = 0; i < s->numel(); ++i)
      if (!kernels::scale_in_kernel_range(s->data[i]))
        return invalid_argument("tensor '" + name + "' in " + *s->file + " holds the scale 2^" +
                                std::to_string(static_cast<int>(s->data[i]) - 127) + " at element " +
                                std::to_string(i) + ", outside 2^-117..2^118");
    return Status::Ok();
  }

  // prefix.weight in BF16/F16/F32, FP8 e4m3 with a 128x128 block prefix.scale,
  // or FP4 e2m1 (two per byte, low nibble first) with a per-32 prefix.scale.
  StatusOr<Linear> linear(const std::string& prefix, int64_t out, int64_t in) {
    Linear l;
    l.out = out;
    l.in = in;
    const std::string wname = prefix + ".weight";
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(wname));
    if (const TensorInfo* ws = ckpt_.find(prefix + ".weight_scale")) return int8_linear(prefix, t, ws, out, in);
    const bool quantized = t->dtype == DType::kF8E4M3 || t->dtype == DType::kI8 || t->dtype == DType::kU8;
    if (quantized && in % 128) {
      return invalid_argument("quantized tensor '" + wname + "' in " + *t->file +
                              " needs an input size divisible by 128, got " + std::to_string(in));
    }
    if (t->dtype == DType::kF8E4M3) {
      DSV4_RETURN_IF_ERROR(tensor(wname, {out, in}).status());
      const int64_t sr = ceil_div(out, 128), sc = ceil_div(in, 128);
      DSV4_ASSIGN_OR_RETURN(const TensorInfo* s, tensor(prefix + ".scale", {sr, sc}));
      l.format = WeightFormat::kFp8Block;
      l.round_input = reference_rounds_input(prefix);
      if (s->dtype == DType::kF8E8M0) {  // kept as stored: codes, and each row's block scales
        DSV4_RETURN_IF_ERROR(check_scales(s, prefix + ".scale"));
        l.codes.assign(t->data, t->data + out * in);
        l.scales.resize(out * sc);
        for (int64_t r = 0; r < out; ++r) std::copy_n(s->data + (r / 128) * sc, sc, &l.scales[r * sc]);
        return l;
      }
      std::vector<float> scale(s->numel());
      DSV4_RETURN_IF_ERROR(to_f32(s, scale.data()));
      l.w.resize(out * in);
      parallel_for(out, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = 0; c < in; ++c)
            l.w[r * in + c] = e4m3_to_f32(t->data[r * in + c]) * scale[(r / 128) * sc + c / 128];
      });
    } else if (t->dtype == DType::kI8 || t->dtype == DType::kU8) {
      if (in % 32) return invalid_argument("FP4 tensor '" + wname + "' needs an input size divisible by 32");
      DSV4_RETURN_IF_ERROR(tensor(wname, {out, in / 2}).status());
      DSV4_ASSIGN_OR_RETURN(const TensorInfo* s, tensor(prefix + ".scale", {out, in / 32}));
      l.format = WeightFormat::kFp4Block;
      l.round_input = reference_rounds_input(prefix);
      auto nibble = [&](int64_t r, int64_t c) -> uint8_t {
        const uint8_t byte = t->data[r * (in / 2) + c / 2];
        return (c & 1) ? (byte >> 4) : (byte & 0xF);
      };
      if (s->dtype == DType::kF8E8M0) {
        DSV4_RETURN_IF_ERROR(check_scales(s, prefix + ".scale"));
        l.codes.resize(out * in);
        for (int64_t r = 0; r < out; ++r)
          for (int64_t c = 0; c < in; ++c) l.codes[r * in + c] = nibble(r, c);
        l.scales.assign(s->data, s->data + out * (in / 32));
        return l;
      }
      std::vector<float> scale(s->numel());
      DSV4_RETURN_IF_ERROR(to_f32(s, scale.data()));
      l.w.resize(out * in);
      parallel_for(out, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = 0; c < in; ++c) l.w[r * in + c] = e2m1_to_f32(nibble(r, c)) * scale[r * (in / 32) + c / 32];
      });
    } else if (t->dtype == DType::kBF16) {  // kept as stored
      DSV4_RETURN_IF_ERROR(tensor(wname, {out, in}).status());
      l.format = WeightFormat::kBf16;
      l.codes.assign(t->data, t->data + 2 * out * in);
    } else {
      DSV4_RETURN_IF_ERROR(tensor(wname, {out, in}).status());
      l.w.resize(out * in);
      DSV4_RETURN_IF_ERROR(to_f32(t, l.w.data()));
    }
    return l;
  }

 private:
  // W8A8 (compressed-tensors): prefix.weight I8 [out, in] with
  // prefix.weight_scale [out, 1] per output channel. Linears the reference
  // feeds an unrounded input keep f32 weights (int8 times scale) instead.
  StatusOr<Linear> int8_linear(const std::string& prefix, const TensorInfo* t, const TensorInfo* ws, int64_t out,
                               int64_t in) {
    if (t->dtype != DType::kI8) return wrong_dtype(t, "I8 (W8A8 with a weight_scale)");
    DSV4_RETURN_IF_ERROR(tensor(prefix + ".weight", {out, in}).status());
    if (ws->numel() != out)
      return invalid_argument("tensor '" + prefix + ".weight_scale' in " + *ws->file + " has shape " +
                              ws->shape_string() + ", expected one scale per output channel [" +
                              std::to_string(out) + ", 1]");
    Linear l;
    l.out = out;
    l.in = in;
    std::vector<float> scale(out);
    DSV4_RETURN_IF_ERROR(to_f32(ws, scale.data()));
    for (int64_t r = 0; r < out; ++r)
      if (!std::isfinite(scale[r]) || scale[r] < 0.0f)
        return invalid_argument("tensor '" + prefix + ".weight_scale' in " + *ws->file + " holds " +
                                std::to_string(scale[r]) + " at row " + std::to_string(r) +
                                ", not a finite non-negative scale");
    const auto* q = reinterpret_cast<const int8_t*>(t->data);
    if (!reference_rounds_input(prefix)) {
      l.w.resize(out * in);
      for (int64_t r = 0; r < out; ++r)
        for (int64_t c = 0; c < in; ++c) l.w[r * in + c] = static_cast<float>(q[r * in + c]) * scale[r];
      return l;
    }
    l.format = WeightFormat::kInt8Channel;
    l.round_input = true;
    l.codes.assign(t->data, t->data + out * in);
    l.channel_scales = std::move(scale);
    return l;
  }

  Status to_f32(const TensorInfo* t, float* out) {
    const int64_t n = t->numel();
    switch (t->dtype) {
      case DType::kF32: std::memcpy(out, t->data, 4 * n); break;
      case DType::kBF16:
        for (int64_t i = 0; i < n; ++i) {
          uint16_t v;
          std::memcpy(&v, t->data + 2 * i, 2);
          out[i] = bf16_to_f32(v);
        }
        break;
      case DType::kF16:
        for (int64_t i = 0; i < n; ++i) {
          uint16_t v;
          std::memcpy(&v, t->data + 2 * i, 2);
          out[i] = f16_to_f32(v);
        }
        break;
      case DType::kF8E8M0:
        for (int64_t i = 0; i < n; ++i) out[i] = e8m0_to_f32(t->data[i]);
        break;
      default: return wrong_dtype(t, "F32, BF16 or F16");
    }
    return Status::Ok();
  }

  const Checkpoint& ckpt_;
  const LoadProgress& progress_;
  ExpertShard experts_;
  TensorShard heads_;
  uint64_t loaded_ = 0;
};

}  // namespace

bool reference_rounds_input(const std::string& prefix) {
  // The compressors' wkv / wgate (kept in f32), wo_a (an einsum on the
  // dequantized weight) and the indexer's weights_proj (BF16) take their
  // input as it is.
  for (const char* plain : {".compressor.wkv", ".compressor.wgate", ".wo_a", ".weights_proj"})
    if (ends_with(prefix, plain)) return false;
  return true;
}

namespace {

StatusOr<CompressorWeights> load_compressor(Loader& ld, const std::string& p, const ModelConfig& c, int ratio,
                                            int head_dim, bool rotate) {
  CompressorWeights w;
  w.ratio = ratio;
  w.head_dim = head_dim;
  w.overlap = ratio == 4;
  w.rotate = rotate;
  const int64_t width = (w.overlap ? 2 : 1) * head_dim;
  DSV4_ASSIGN_OR_RETURN(w.wkv, ld.linear(p + ".wkv", width, c.dim));
  DSV4_ASSIGN_OR_RETURN(w.wgate, ld.linear(p + ".wgate", width, c.dim));
  DSV4_ASSIGN_OR_RETURN(w.ape, ld.floats(p + ".ape", {ratio, width}));
  DSV4_ASSIGN_OR_RETURN(w.norm, ld.floats(p + ".norm.weight", {head_dim}));
  return w;
}

// Rows [begin, begin + count) of a linear (a rank's output features).
Linear slice_rows(const Linear& l, int64_t begin, int64_t count) {
  Linear s;
  s.out = count;
  s.in = l.in;
  s.format = l.format;
  s.round_input = l.round_input;
  if (!l.codes.empty()) {
    const int64_t per_row = static_cast<int64_t>(l.scales.size()) / l.out;
    const int64_t row_bytes = static_cast<int64_t>(l.codes.size()) / l.out;
    s.codes.assign(l.codes.begin() + begin * row_bytes, l.codes.begin() + (begin + count) * row_bytes);
    s.scales.assign(l.scales.begin() + begin * per_row, l.scales.begin() + (begin + count) * per_row);
    if (!l.channel_scales.empty())
      s.channel_scales.assign(l.channel_scales.begin() + begin, l.channel_scales.begin() + begin + count);
  } else {
    s.w.assign(l.w.begin() + begin * l.in, l.w.begin() + (begin + count) * l.in);
  }
  return s;
}

StatusOr<AttentionWeights> load_attention(Loader& ld, const std::string& p, const ModelConfig& c, int ratio) {
  AttentionWeights a;
  a.ratio = ratio;
  const int64_t hd = c.head_dim, heads = c.n_heads;
  DSV4_ASSIGN_OR_RETURN(a.attn_sink, ld.floats(p + ".attn_sink", {heads}));
  DSV4_ASSIGN_OR_RETURN(a.wq_a, ld.linear(p + ".wq_a", c.q_lora_rank, c.dim));
  DSV4_ASSIGN_OR_RETURN(a.q_norm, ld.floats(p + ".q_norm.weight", {c.q_lora_rank}));
  DSV4_ASSIGN_OR_RETURN(a.wq_b, ld.linear(p + ".wq_b", heads * hd, c.q_lora_rank));
  DSV4_ASSIGN_OR_RETURN(a.wkv, ld.linear(p + ".wkv", hd, c.dim));
  DSV4_ASSIGN_OR_RETURN(a.kv_norm, ld.floats(p + ".kv_norm.weight", {hd}));
  DSV4_ASSIGN_OR_RETURN(Linear wo_a, ld.linear(p + ".wo_a", c.o_groups * c.o_lora_rank, heads * hd / c.o_groups));
  DSV4_ASSIGN_OR_RETURN(a.wo_b, ld.linear(p + ".wo_b", c.dim, c.o_groups * c.o_lora_rank));
  if (ratio) {
    DSV4_ASSIGN_OR_RETURN(a.compressor, load_compressor(ld, p + ".compressor", c, ratio, c.head_dim, false));
    if (ratio == 4) {
      IndexerWeights ix;
      DSV4_ASSIGN_OR_RETURN(ix.wq_b, ld.linear(p + ".indexer.wq_b", int64_t{c.index_n_heads} * c.index_head_dim, c.q_lora_rank));
      DSV4_ASSIGN_OR_RETURN(ix.weights_proj, ld.linear(p + ".indexer.weights_proj", c.index_n_heads, c.dim));
      DSV4_ASSIGN_OR_RETURN(ix.compressor, load_compressor(ld, p + ".indexer.compressor", c, ratio, c.index_head_dim, true));
      a.indexer = std::move(ix);
    }
  }
  // Tensor parallelism: this rank's heads, output groups, indexer heads and
  // wo_b output features.
  const TensorShard& tp = ld.heads();
  if (tp.size > 1) {
    const int64_t hl = heads / tp.size, olr = c.o_lora_rank, G = c.o_groups;
    // Fewer groups than ranks: a group's heads span tp / G ranks, each of
    // which holds that group's wo_a.
    const int64_t gl = std::max<int64_t>(1, G / tp.size), g0 = G >= tp.size ? tp.rank * gl : tp.rank / (tp.size / G);
    a.attn_sink.assign(a.attn_sink.begin() + tp.rank * hl, a.attn_sink.begin() + (tp.rank + 1) * hl);
    a.wq_b = slice_rows(a.wq_b, tp.rank * hl * hd, hl * hd);
    wo_a = slice_rows(wo_a, g0 * olr, gl * olr);
    a.wo_b = slice_rows(a.wo_b, tp.rank * (c.dim / tp.size), c.dim / tp.size);
    // The projections every head reads, split by output features (each rank
    // computes its share and the group gathers whole rows).
    auto split = [&](Linear* l) { *l = slice_rows(*l, tp.rank * (l->out / tp.size), l->out / tp.size); };
    split(&a.wq_a);
    split(&a.wkv);
    if (a.compressor) split(&a.compressor->wkv), split(&a.compressor->wgate);
    if (a.indexer) split(&a.indexer->compressor.wkv), split(&a.indexer->compressor.wgate);
    if (a.indexer) {
      const int64_t il = c.index_n_heads / tp.size;
      a.indexer->wq_b = slice_rows(a.indexer->wq_b, tp.rank * il * c.index_head_dim, il * c.index_head_dim);
      a.indexer->weights_proj = slice_rows(a.indexer->weights_proj, tp.rank * il, il);
    }
  }
  for (int64_t g = 0; g < wo_a.out / c.o_lora_rank; ++g)
    a.wo_a.push_back(slice_rows(wo_a, g * c.o_lora_rank, c.o_lora_rank));
  return a;
}

StatusOr<ExpertWeights> load_expert(Loader& ld, const std::string& p, const ModelConfig& c) {
  ExpertWeights e;
  DSV4_ASSIGN_OR_RETURN(e.w1, ld.linear(p + ".w1", c.moe_inter_dim, c.dim));
  DSV4_ASSIGN_OR_RETURN(e.w2, ld.linear(p + ".w2", c.dim, c.moe_inter_dim));
  DSV4_ASSIGN_OR_RETURN(e.w3, ld.linear(p + ".w3", c.moe_inter_dim, c.dim));
  return e;
}

StatusOr<MoEWeights> load_moe(Loader& ld, const std::string& p, const ModelConfig& c, bool hash) {
  MoEWeights m;
  m.hash = hash;
  DSV4_ASSIGN_OR_RETURN(auto gate, ld.floats(p + ".gate.weight", {c.n_routed_experts, c.dim}));
  m.gate = Linear::dense(std::move(gate), c.n_routed_experts, c.dim);
  if (hash) {
    DSV4_ASSIGN_OR_RETURN(m.tid2eid, ld.ints(p + ".gate.tid2eid", {c.vocab_size, c.n_activated_experts}, c.n_routed_experts));
  } else {
    DSV4_ASSIGN_OR_RETURN(m.gate_bias, ld.floats(p + ".gate.bias", {c.n_routed_experts}));
  }
  for (int e = 0; e < c.n_routed_experts; ++e) {
    if (!ld.experts().owns(e, c.n_routed_experts)) {  // another rank's expert
      m.experts.emplace_back();
      continue;
    }
    DSV4_ASSIGN_OR_RETURN(auto ex, load_expert(ld, p + ".experts." + std::to_string(e), c));
    m.experts.push_back(std::move(ex));
  }
  DSV4_ASSIGN_OR_RETURN(m.shared, load_expert(ld, p + ".shared_experts", c));
  const TensorShard& tp = ld.heads();
  if (tp.size > 1) {  // the shared expert by output features: w1/w3 hidden, w2 model dims
    const int64_t inter = c.moe_inter_dim / tp.size, dim = c.dim / tp.size;
    m.shared.w1 = slice_rows(m.shared.w1, tp.rank * inter, inter);
    m.shared.w3 = slice_rows(m.shared.w3, tp.rank * inter, inter);
    m.shared.w2 = slice_rows(m.shared.w2, tp.rank * dim, dim);
  }
  return m;
}

StatusOr<HyperConnWeights> load_hc(Loader& ld, const std::string& p, const std::string& which, const ModelConfig& c) {
  HyperConnWeights h;
  DSV4_ASSIGN_OR_RETURN(auto fn, ld.floats(p + "hc_" + which + "_fn", {c.mix_hc(), int64_t{c.hc_mult} * c.dim}));
  h.fn = Linear::dense(std::move(fn), c.mix_hc(), int64_t{c.hc_mult} * c.dim);
  DSV4_ASSIGN_OR_RETURN(h.base, ld.floats(p + "hc_" + which + "_base", {c.mix_hc()}));
  DSV4_ASSIGN_OR_RETURN(h.scale, ld.floats(p + "hc_" + which + "_scale", {3}));
  return h;
}

StatusOr<HcHeadWeights> load_hc_head(Loader& ld, const std::string& p, const ModelConfig& c) {
  HcHeadWeights h;
  DSV4_ASSIGN_OR_RETURN(auto fn, ld.floats(p + "hc_head_fn", {c.hc_mult, int64_t{c.hc_mult} * c.dim}));
  h.fn = Linear::dense(std::move(fn), c.hc_mult, int64_t{c.hc_mult} * c.dim);
  DSV4_ASSIGN_OR_RETURN(h.base, ld.floats(p + "hc_head_base", {c.hc_mult}));
  DSV4_ASSIGN_OR_RETURN(h.scale, ld.floats(p + "hc_head_scale", {1}));
  return h;
}

StatusOr<BlockWeights> load_block(Loader& ld, const std::string& p, const ModelConfig& c, int layer) {
  BlockWeights b;
  DSV4_ASSIGN_OR_RETURN(b.attn, load_attention(ld, p + "attn", c, c.compress_ratio(layer)));
  DSV4_ASSIGN_OR_RETURN(b.ffn, load_moe(ld, p + "ffn", c, c.is_hash_layer(layer)));
  DSV4_ASSIGN_OR_RETURN(b.attn_norm, ld.floats(p + "attn_norm.weight", {c.dim}));
  DSV4_ASSIGN_OR_RETURN(b.ffn_norm, ld.floats(p + "ffn_norm.weight", {c.dim}));
  DSV4_ASSIGN_OR_RETURN(b.hc_attn, load_hc(ld, p, "attn", c));
  DSV4_ASSIGN_OR_RETURN(b.hc_ffn, load_hc(ld, p, "ffn", c));
  return b;
}

}  // namespace

StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::load(const ModelConfig& c, const Checkpoint& ckpt,
                                                          const LoadProgress& progress, const ExpertShard& experts,
                                                          const TensorShard& heads) {
  const int tp = heads.size;
  if (tp < 1 || heads.rank < 0 || heads.rank >= tp || c.n_heads % tp || (c.o_groups % tp && tp % c.o_groups) ||
      c.index_n_heads % tp || c.vocab_size % tp || c.dim % tp || c.moe_inter_dim % tp || c.q_lora_rank % tp ||
      c.head_dim % tp || c.index_head_dim % tp)
    return invalid_argument("tensor parallelism over " + std::to_string(tp) + " ranks must divide the " +
                            std::to_string(c.n_heads) + " heads, " + std::to_string(c.index_n_heads) +
                            " indexer heads, the hidden size " + std::to_string(c.dim) + ", the expert width " +
                            std::to_string(c.moe_inter_dim) + ", the query rank, the head sizes and the vocabulary of " +
                            std::to_string(c.vocab_size) +
                            ", and divide or be a multiple of the " + std::to_string(c.o_groups) + " output groups");
  if (experts.size < 1 || experts.rank < 0 || experts.rank >= experts.size || c.n_routed_experts % experts.size)
    return invalid_argument("expert shard " + std::to_string(experts.rank) + " of " + std::to_string(experts.size) +
                            " does not divide the " + std::to_string(c.n_routed_experts) + " routed experts");
  Loader ld(ckpt, progress, experts, heads);
  auto w = std::make_unique<ModelWeights>();
  DSV4_ASSIGN_OR_RETURN(w->embed, ld.embedding("embed.weight", c.vocab_size, c.dim));
  for (int i = 0; i < c.n_layers; ++i) {
    DSV4_ASSIGN_OR_RETURN(auto b, load_block(ld, "layers." + std::to_string(i) + ".", c, i));
    w->blocks.push_back(std::move(b));
  }
  DSV4_ASSIGN_OR_RETURN(w->norm, ld.floats("norm.weight", {c.dim}));
  DSV4_ASSIGN_OR_RETURN(w->head, ld.linear("head", c.vocab_size, c.dim));
  DSV4_ASSIGN_OR_RETURN(w->hc_head, load_hc_head(ld, "", c));
  for (int i = 0; i < c.n_mtp_layers; ++i) {
    const std::string p = "mtp." + std::to_string(i) + ".";
    MtpWeights m;
    DSV4_ASSIGN_OR_RETURN(m.block, load_block(ld, p, c, c.n_layers + i));
    DSV4_ASSIGN_OR_RETURN(m.e_proj, ld.linear(p + "e_proj", c.dim, c.dim));
    DSV4_ASSIGN_OR_RETURN(m.h_proj, ld.linear(p + "h_proj", c.dim, c.dim));
    DSV4_ASSIGN_OR_RETURN(m.enorm, ld.floats(p + "enorm.weight", {c.dim}));
    DSV4_ASSIGN_OR_RETURN(m.hnorm, ld.floats(p + "hnorm.weight", {c.dim}));
    DSV4_ASSIGN_OR_RETURN(m.norm, ld.floats(p + "norm.weight", {c.dim}));
    DSV4_ASSIGN_OR_RETURN(m.hc_head, load_hc_head(ld, p, c));
    w->mtp.push_back(std::move(m));
  }
  if (heads.size > 1) {  // embedding and head by vocabulary
    const int64_t part = static_cast<int64_t>(c.vocab_size) / heads.size;
    w->embed.keep_rows(heads.rank * part, part);
    w->head = slice_rows(w->head, heads.rank * part, part);
  }
  w->pack();
  if (progress) progress(ckpt.total_bytes(), ckpt.total_bytes());
  return w;
}

namespace {

int64_t linear_bytes(const Linear& l) { return l.resident_bytes(); }

int64_t expert_bytes(const ExpertWeights& e) { return linear_bytes(e.w1) + linear_bytes(e.w2) + linear_bytes(e.w3); }

}  // namespace

void EmbeddingTable::row(int64_t r, float* out) const {
  if (!f32.empty()) {
    std::memcpy(out, &f32[r * dim], sizeof(float) * dim);
    return;
  }
  for (int64_t i = 0; i < dim; ++i) out[i] = bf16_to_f32(bf16[r * dim + i]);
}

void EmbeddingTable::keep_rows(int64_t begin, int64_t count) {
  if (!f32.empty()) f32 = std::vector<float>(f32.begin() + begin * dim, f32.begin() + (begin + count) * dim);
  if (!bf16.empty()) bf16 = std::vector<uint16_t>(bf16.begin() + begin * dim, bf16.begin() + (begin + count) * dim);
  rows = count;
}

namespace {

// Every linear of the model with its kind, for const and mutable weights.
template <class Weights, class Fn>
void visit_linears(Weights& w, Fn&& fn) {
  auto comp = [&](auto& c) {
    fn(c.wkv, LinearKind::kMain);
    fn(c.wgate, LinearKind::kMain);
  };
  auto block = [&](auto& b, LinearKind kind, LinearKind routed) {
    auto& a = b.attn;
    for (auto* l : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b}) fn(*l, kind);
    for (auto& g : a.wo_a) fn(g, kind);
    if (a.compressor) comp(*a.compressor);
    if (a.indexer) {
      fn(a.indexer->wq_b, kind);
      fn(a.indexer->weights_proj, kind);
      comp(a.indexer->compressor);
    }
    for (auto& e : b.ffn.experts)
      for (auto* l : {&e.w1, &e.w2, &e.w3}) fn(*l, routed);
    for (auto* l : {&b.ffn.shared.w1, &b.ffn.shared.w2, &b.ffn.shared.w3}) fn(*l, kind);
    for (auto* l : {&b.ffn.gate, &b.hc_attn.fn, &b.hc_ffn.fn}) fn(*l, kind);
  };
  for (auto& b : w.blocks) block(b, LinearKind::kMain, LinearKind::kRoutedExpert);
  for (auto& t : w.mtp) {
    block(t.block, LinearKind::kMtp, LinearKind::kMtp);
    fn(t.e_proj, LinearKind::kMtp);
    fn(t.h_proj, LinearKind::kMtp);
    fn(t.hc_head.fn, LinearKind::kMtp);
  }
  fn(w.hc_head.fn, LinearKind::kMain);
  fn(w.head, LinearKind::kHead);
}

}  // namespace

void ModelWeights::for_each_linear(const std::function<void(const Linear&, LinearKind)>& fn) const {
  visit_linears(*this, fn);
}

void ModelWeights::pack() {
  visit_linears(*this, [](Linear& l, LinearKind) { l.pack(); });
}

int64_t ModelWeights::routed_expert_bytes() const {
  int64_t n = 0;
  for_each_linear([&](const Linear& l, LinearKind kind) {
    if (kind == LinearKind::kRoutedExpert) n += l.resident_bytes();
  });
  for (const MtpWeights& t : mtp)
    for (const ExpertWeights& e : t.block.ffn.experts) n += expert_bytes(e);
  return n;
}

int64_t ModelWeights::resident_bytes() const {
  int64_t n = 0;
  auto lin = [&](const Linear& l) { n += l.resident_bytes(); };
  auto vec = [&](const std::vector<float>& v) { n += 4 * static_cast<int64_t>(v.size()); };
  auto comp = [&](const CompressorWeights& c) {
    lin(c.wkv);
    lin(c.wgate);
    vec(c.ape);
    vec(c.norm);
  };
  auto block = [&](const BlockWeights& b) {
    const AttentionWeights& a = b.attn;
    vec(a.attn_sink);
    lin(a.wq_a);
    vec(a.q_norm);
    lin(a.wq_b);
    lin(a.wkv);
    vec(a.kv_norm);
    for (const Linear& g : a.wo_a) lin(g);
    lin(a.wo_b);
    if (a.compressor) comp(*a.compressor);
    if (a.indexer) {
      lin(a.indexer->wq_b);
      lin(a.indexer->weights_proj);
      comp(a.indexer->compressor);
    }
    lin(b.ffn.gate);
    vec(b.ffn.gate_bias);
    for (const ExpertWeights& e : b.ffn.experts) {
      lin(e.w1);
      lin(e.w2);
      lin(e.w3);
    }
    lin(b.ffn.shared.w1);
    lin(b.ffn.shared.w2);
    lin(b.ffn.shared.w3);
    vec(b.attn_norm);
    vec(b.ffn_norm);
    lin(b.hc_attn.fn);
    lin(b.hc_ffn.fn);
  };
  const ModelWeights& w = *this;
  n += w.embed.resident_bytes();
  vec(w.norm);
  lin(w.head);
  lin(w.hc_head.fn);
  for (const BlockWeights& b : w.blocks) block(b);
  for (const MtpWeights& t : w.mtp) {
    block(t.block);
    lin(t.e_proj);
    lin(t.h_proj);
  }
  return n;
}

}  // namespace dsv4
