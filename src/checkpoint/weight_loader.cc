#include "checkpoint/weight_loader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "base/dtype.h"
#include "kernels/kernels.h"

namespace dsv4 {
namespace {

using kernels::kPanel;
using kernels::PanelFormat;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows [begin, begin + count) of a [out, in] weight: this rank's share.
struct RowRange {
  int64_t begin = 0, count = 0;
};

// Rows per load task: whole panels, about kLoadTaskBytes of the file.
int64_t rows_per_task(int64_t row_bytes) {
  return std::max<int64_t>(1, static_cast<int64_t>(kLoadTaskBytes) / std::max<int64_t>(1, row_bytes * kPanel)) *
         kPanel;
}

Status wrong_dtype(const TensorInfo& t, const char* expected) {
  return invalid_argument("tensor '" + t.name + "' in " + *t.file + " has dtype " + dtype_name(t.dtype) +
                          ", expected " + expected);
}

// n elements of t's dtype as f32.
Status to_f32(const TensorInfo& t, const uint8_t* src, int64_t n, float* out) {
  switch (t.dtype) {
    case DType::kF32: std::memcpy(out, src, 4 * n); break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, src + 2 * i, 2);
        out[i] = bf16_to_f32(v);
      }
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, src + 2 * i, 2);
        out[i] = f16_to_f32(v);
      }
      break;
    case DType::kF8E8M0:
      for (int64_t i = 0; i < n; ++i) out[i] = e8m0_to_f32(src[i]);
      break;
    default: return wrong_dtype(t, "F32, BF16 or F16");
  }
  return Status::Ok();
}

bool dense_dtype(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

// E8M0 scales the kernels can apply by an exponent addition (every real
// checkpoint's are; 2^-117..2^118).
Status check_scales(const TensorInfo& s, const uint8_t* scales, int64_t n, int64_t first_element) {
  for (int64_t i = 0; i < n; ++i)
    if (!kernels::scale_in_kernel_range(scales[i]))
      return invalid_argument("tensor '" + s.name + "' in " + *s.file + " holds the scale 2^" +
                              std::to_string(static_cast<int>(scales[i]) - 127) + " at element " +
                              std::to_string(first_element + i) + ", outside 2^-117..2^118");
  return Status::Ok();
}

// How rows of a weight the forward keeps in f32 are decoded: a dense dtype,
// or FP8 / FP4 / int8 codes times scales that are not e8m0 (read whole,
// they are small).
struct DenseDecode {
  enum Kind { kPlain, kFp8, kFp4, kInt8 } kind = kPlain;
  std::shared_ptr<const std::vector<float>> scales;  // FP8 [out/128, in/128], FP4 [out, in/32], int8 [out]
};

// Reads tensors by name with shape and dtype checks, and plans the reads of
// this rank's share into the weights' final buffers.
class Loader {
 public:
  Loader(const Checkpoint& ckpt, const WeightLoadOptions& options) : ckpt_(ckpt), options_(options) {}
  const ExpertShard& experts() const { return options_.experts; }
  const TensorShard& heads() const { return options_.heads; }
  LoadTasks& tasks() { return tasks_; }

  // This rank's rows of a weight split by output features over the tensor-
  // parallel group (all of them on one rank).
  RowRange share(int64_t out) const {
    const int64_t part = out / heads().size;
    return {heads().rank * part, part};
  }

  StatusOr<const TensorInfo*> tensor(const std::string& name, const std::vector<int64_t>& shape) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(name));
    if (t->shape != shape) {
      return invalid_argument("tensor '" + name + "' in " + *t->file + " has shape " + t->shape_string() +
                              ", expected " + shape_str(shape));
    }
    return t;
  }

  // A small tensor read now, whole.
  StatusOr<std::vector<float>> floats(const std::string& name, const std::vector<int64_t>& shape) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, tensor(name, shape));
    if (!dense_dtype(t->dtype) && t->dtype != DType::kF8E8M0) return wrong_dtype(*t, "F32, BF16 or F16");
    std::vector<uint8_t> bytes(t->nbytes);
    DSV4_RETURN_IF_ERROR(t->source->read(*t, 0, t->nbytes, bytes.data()));
    std::vector<float> out(t->numel());
    DSV4_RETURN_IF_ERROR(to_f32(*t, bytes.data(), t->numel(), out.data()));
    return out;
  }

  StatusOr<std::vector<int32_t>> ints(const std::string& name, const std::vector<int64_t>& shape, int64_t limit) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, tensor(name, shape));
    if (t->dtype != DType::kI64 && t->dtype != DType::kI32) return wrong_dtype(*t, "I32 or I64");
    std::vector<uint8_t> bytes(t->nbytes);
    DSV4_RETURN_IF_ERROR(t->source->read(*t, 0, t->nbytes, bytes.data()));
    std::vector<int32_t> out(t->numel());
    for (int64_t i = 0; i < t->numel(); ++i) {
      int64_t v;
      if (t->dtype == DType::kI64) {
        std::memcpy(&v, bytes.data() + 8 * i, 8);
      } else {
        int32_t v32;
        std::memcpy(&v32, bytes.data() + 4 * i, 4);
        v = v32;
      }
      if (v < 0 || v >= limit) {
        return invalid_argument("tensor '" + name + "' in " + *t->file + " holds " + std::to_string(v) +
                                " at element " + std::to_string(i) + ", outside [0, " + std::to_string(limit) + ")");
      }
      out[i] = static_cast<int32_t>(v);
    }
    return out;
  }

  // Rows `rows` of a [rows_total, dim] table, kept as stored (BF16) or f32.
  StatusOr<EmbeddingTable> embedding(const std::string& name, int64_t rows_total, int64_t dim, RowRange rows) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, tensor(name, {rows_total, dim}));
    if (!dense_dtype(t->dtype)) return wrong_dtype(*t, "F32, BF16 or F16");
    EmbeddingTable e;
    e.rows = rows.count;
    e.dim = dim;
    const int64_t row_bytes = dim * static_cast<int64_t>(dtype_size(t->dtype));
    const int64_t step = rows_per_task(row_bytes);
    if (t->dtype == DType::kBF16) e.bf16.resize(rows.count * dim);
    else e.f32.resize(rows.count * dim);
    for (int64_t r = 0; r < rows.count; r += step) {
      const int64_t m = std::min(step, rows.count - r), begin = (rows.begin + r) * row_bytes;
      if (t->dtype == DType::kBF16) {
        uint16_t* dst = e.bf16.data() + r * dim;
        tasks_.add(*t, begin, m * row_bytes,
                   [t, begin, m, row_bytes, dst](LoadScratch&) { return t->source->read(*t, begin, m * row_bytes, dst); });
      } else {
        float* dst = e.f32.data() + r * dim;
        tasks_.add(*t, begin, m * row_bytes, [t, begin, m, row_bytes, dim, dst](LoadScratch& s) {
          s.bytes.resize(m * row_bytes);
          DSV4_RETURN_IF_ERROR(t->source->read(*t, begin, m * row_bytes, s.bytes.data()));
          return to_f32(*t, s.bytes.data(), m * dim, dst);
        });
      }
    }
    return e;
  }

  // prefix.weight in BF16/F16/F32, FP8 e4m3 with a 128x128 block prefix.scale,
  // FP4 e2m1 (two per byte, low nibble first) with a per-32 prefix.scale, or
  // W8A8 int8 with a per-channel prefix.weight_scale; rows `rows` of it.
  StatusOr<Linear> linear(const std::string& prefix, int64_t out, int64_t in, RowRange rows) {
    Linear l;
    l.out = rows.count;
    l.in = in;
    const std::string wname = prefix + ".weight";
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(wname));
    if (const TensorInfo* ws = ckpt_.find(prefix + ".weight_scale")) return int8_linear(prefix, t, ws, out, in, rows);
    const bool quantized = t->dtype == DType::kF8E4M3 || t->dtype == DType::kI8 || t->dtype == DType::kU8;
    if (quantized && in % 128) {
      return invalid_argument("quantized tensor '" + wname + "' in " + *t->file +
                              " needs an input size divisible by 128, got " + std::to_string(in));
    }
    if (t->dtype == DType::kF8E4M3) {
      DSV4_RETURN_IF_ERROR(tensor(wname, {out, in}).status());
      DSV4_ASSIGN_OR_RETURN(const TensorInfo* s, tensor(prefix + ".scale", {ceil_div(out, 128), ceil_div(in, 128)}));
      l.format = WeightFormat::kFp8Block;
      l.round_input = reference_rounds_input(prefix);
      if (s->dtype == DType::kF8E8M0) {
        plan_panels(PanelFormat::kFp8, t, s, rows, &l);
      } else {
        DSV4_ASSIGN_OR_RETURN(auto scales, floats(s->name, s->shape));
        plan_dense(t, rows, {DenseDecode::kFp8, std::make_shared<std::vector<float>>(std::move(scales))}, &l);
      }
    } else if (t->dtype == DType::kI8 || t->dtype == DType::kU8) {
      if (in % 32) return invalid_argument("FP4 tensor '" + wname + "' needs an input size divisible by 32");
      DSV4_RETURN_IF_ERROR(tensor(wname, {out, in / 2}).status());
      DSV4_ASSIGN_OR_RETURN(const TensorInfo* s, tensor(prefix + ".scale", {out, in / 32}));
      l.format = WeightFormat::kFp4Block;
      l.round_input = reference_rounds_input(prefix);
      if (s->dtype == DType::kF8E8M0) {
        plan_panels(PanelFormat::kFp4, t, s, rows, &l);
      } else {
        DSV4_ASSIGN_OR_RETURN(auto scales, floats(s->name, s->shape));
        plan_dense(t, rows, {DenseDecode::kFp4, std::make_shared<std::vector<float>>(std::move(scales))}, &l);
      }
    } else if (t->dtype == DType::kBF16) {  // kept as stored
      DSV4_RETURN_IF_ERROR(tensor(wname, {out, in}).status());
      l.format = WeightFormat::kBf16;
      plan_panels(PanelFormat::kBf16, t, nullptr, rows, &l);
    } else {
      DSV4_RETURN_IF_ERROR(tensor(wname, {out, in}).status());
      if (!dense_dtype(t->dtype)) return wrong_dtype(*t, "F32, BF16 or F16");
      plan_dense(t, rows, {}, &l);
    }
    return l;
  }

  // A weight the forward keeps in f32 whatever its dtype (router gates, mHC).
  StatusOr<Linear> dense_linear(const std::string& name, int64_t out, int64_t in) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, tensor(name, {out, in}));
    if (!dense_dtype(t->dtype)) return wrong_dtype(*t, "F32, BF16 or F16");
    Linear l;
    l.out = out;
    l.in = in;
    plan_dense(t, {0, out}, {}, &l);
    return l;
  }

 private:
  // BF16, FP8 or FP4 rows packed into panels as they are read.
  void plan_panels(PanelFormat f, const TensorInfo* t, const TensorInfo* s, RowRange rows, Linear* l) {
    const int64_t in = l->in, n = rows.count;
    l->code_panels.resize(kernels::packed_code_bytes(f, n, in));
    l->scale_panels.resize(kernels::packed_scale_bytes(f, n, in));
    const int64_t row_bytes = f == PanelFormat::kFp4 ? in / 2 : f == PanelFormat::kFp8 ? in : 2 * in;
    const int64_t panel_codes = kernels::packed_code_bytes(f, kPanel, in);
    const int64_t panel_scales = kernels::packed_scale_bytes(f, kPanel, in);
    const int64_t blocks = f == PanelFormat::kFp8 ? ceil_div(in, 128) : in / 32;
    const int64_t step = rows_per_task(row_bytes);
    for (int64_t r = 0; r < n; r += step) {
      const int64_t m = std::min(step, n - r), row0 = rows.begin + r;
      uint8_t* codes = l->code_panels.data() + r / kPanel * panel_codes;
      uint8_t* scales = l->scale_panels.data() + r / kPanel * panel_scales;
      tasks_.add(*t, row0 * row_bytes, m * row_bytes, [=](LoadScratch& sc) -> Status {
        sc.bytes.resize(m * row_bytes);
        DSV4_RETURN_IF_ERROR(t->source->read(*t, row0 * row_bytes, m * row_bytes, sc.bytes.data()));
        kernels::pack_stored_codes(f, sc.bytes.data(), m, in, codes);
        if (!s) return Status::Ok();
        // Each row's scales: FP4 stores them per row, FP8 per 128 rows.
        const int64_t first = f == PanelFormat::kFp4 ? row0 : row0 / 128;
        const int64_t count = f == PanelFormat::kFp4 ? m : (row0 + m - 1) / 128 - first + 1;
        sc.more_bytes.resize((m + count) * blocks);
        uint8_t* stored = sc.more_bytes.data() + m * blocks;
        DSV4_RETURN_IF_ERROR(s->source->read(*s, first * blocks, count * blocks, stored));
        DSV4_RETURN_IF_ERROR(check_scales(*s, stored, count * blocks, first * blocks));
        uint8_t* per_row = sc.more_bytes.data();
        if (f == PanelFormat::kFp4) per_row = stored;
        else
          for (int64_t i = 0; i < m; ++i)
            std::memcpy(per_row + i * blocks, stored + ((row0 + i) / 128 - first) * blocks, blocks);
        kernels::pack_row_scales(f, per_row, m, in, scales);
        return Status::Ok();
      });
    }
  }

  // Rows decoded to f32 and packed into f32 panels as they are read.
  void plan_dense(const TensorInfo* t, RowRange rows, DenseDecode decode, Linear* l) {
    const int64_t in = l->in, n = rows.count;
    l->panels.resize(kernels::packed_floats(n, in));
    const int64_t row_bytes = decode.kind == DenseDecode::kFp4 ? in / 2 : in * static_cast<int64_t>(dtype_size(t->dtype));
    const int64_t step = rows_per_task(row_bytes);
    for (int64_t r = 0; r < n; r += step) {
      const int64_t m = std::min(step, n - r), row0 = rows.begin + r;
      float* panels = l->panels.data() + r * in;  // r is a whole number of panels
      tasks_.add(*t, row0 * row_bytes, m * row_bytes, [=](LoadScratch& sc) -> Status {
        sc.bytes.resize(m * row_bytes);
        DSV4_RETURN_IF_ERROR(t->source->read(*t, row0 * row_bytes, m * row_bytes, sc.bytes.data()));
        sc.floats.resize(m * in);
        float* w = sc.floats.data();
        const uint8_t* b = sc.bytes.data();
        const std::vector<float>* scale = decode.scales.get();
        switch (decode.kind) {
          case DenseDecode::kPlain: DSV4_RETURN_IF_ERROR(to_f32(*t, b, m * in, w)); break;
          case DenseDecode::kFp8:
            for (int64_t i = 0; i < m; ++i)
              for (int64_t c = 0; c < in; ++c)
                w[i * in + c] = e4m3_to_f32(b[i * in + c]) * (*scale)[(row0 + i) / 128 * ceil_div(in, 128) + c / 128];
            break;
          case DenseDecode::kFp4:
            for (int64_t i = 0; i < m; ++i)
              for (int64_t c = 0; c < in; ++c) {
                const uint8_t byte = b[i * (in / 2) + c / 2];
                w[i * in + c] = e2m1_to_f32((c & 1) ? (byte >> 4) : (byte & 0xF)) * (*scale)[(row0 + i) * (in / 32) + c / 32];
              }
            break;
          case DenseDecode::kInt8:
            for (int64_t i = 0; i < m; ++i)
              for (int64_t c = 0; c < in; ++c)
                w[i * in + c] = static_cast<float>(static_cast<int8_t>(b[i * in + c])) * (*scale)[row0 + i];
            break;
        }
        kernels::pack_panels(w, m, in, panels);
        return Status::Ok();
      });
    }
  }

  // W8A8 (compressed-tensors): prefix.weight I8 [out, in] with
  // prefix.weight_scale [out, 1] per output channel. Linears the reference
  // feeds an unrounded input keep f32 weights (int8 times scale) instead.
  StatusOr<Linear> int8_linear(const std::string& prefix, const TensorInfo* t, const TensorInfo* ws, int64_t out,
                               int64_t in, RowRange rows) {
    if (t->dtype != DType::kI8) return wrong_dtype(*t, "I8 (W8A8 with a weight_scale)");
    DSV4_RETURN_IF_ERROR(tensor(prefix + ".weight", {out, in}).status());
    if (ws->numel() != out)
      return invalid_argument("tensor '" + prefix + ".weight_scale' in " + *ws->file + " has shape " +
                              ws->shape_string() + ", expected one scale per output channel [" +
                              std::to_string(out) + ", 1]");
    DSV4_ASSIGN_OR_RETURN(std::vector<float> scale, floats(ws->name, ws->shape));
    for (int64_t r = 0; r < out; ++r)
      if (!std::isfinite(scale[r]) || scale[r] < 0.0f)
        return invalid_argument("tensor '" + prefix + ".weight_scale' in " + *ws->file + " holds " +
                                std::to_string(scale[r]) + " at row " + std::to_string(r) +
                                ", not a finite non-negative scale");
    Linear l;
    l.out = rows.count;
    l.in = in;
    auto shared = std::make_shared<std::vector<float>>(std::move(scale));
    if (!reference_rounds_input(prefix)) {
      plan_dense(t, rows, {DenseDecode::kInt8, shared}, &l);
      return l;
    }
    l.format = WeightFormat::kInt8Channel;
    l.round_input = true;
    const int64_t n = rows.count, kp = kernels::int8_padded_k(in);
    l.code_panels.resize(kernels::int8_code_bytes(n, in));
    l.scale_panels.resize(kernels::int8_panel_extra_bytes(n));
    const int64_t step = rows_per_task(in);
    for (int64_t r = 0; r < n; r += step) {
      const int64_t m = std::min(step, n - r), row0 = rows.begin + r;
      uint8_t* codes = l.code_panels.data() + r * kp;
      uint8_t* extra = l.scale_panels.data() + kernels::int8_panel_extra_bytes(r);
      tasks_.add(*t, row0 * in, m * in, [=](LoadScratch& sc) -> Status {
        sc.bytes.resize(m * in);
        DSV4_RETURN_IF_ERROR(t->source->read(*t, row0 * in, m * in, sc.bytes.data()));
        kernels::pack_int8_panels(reinterpret_cast<const int8_t*>(sc.bytes.data()), shared->data() + row0, m, in,
                                  codes, extra);
        return Status::Ok();
      });
    }
    return l;
  }

  const Checkpoint& ckpt_;
  const WeightLoadOptions& options_;
  LoadTasks tasks_;
};

StatusOr<CompressorWeights> load_compressor(Loader& ld, const std::string& p, const ModelConfig& c, int ratio,
                                            int head_dim, bool rotate) {
  CompressorWeights w;
  w.ratio = ratio;
  w.head_dim = head_dim;
  w.overlap = ratio == 4;
  w.rotate = rotate;
  const int64_t width = (w.overlap ? 2 : 1) * head_dim;
  // Split by output features over tensor parallelism: each rank computes
  // its share and the group gathers whole rows.
  DSV4_ASSIGN_OR_RETURN(w.wkv, ld.linear(p + ".wkv", width, c.dim, ld.share(width)));
  DSV4_ASSIGN_OR_RETURN(w.wgate, ld.linear(p + ".wgate", width, c.dim, ld.share(width)));
  DSV4_ASSIGN_OR_RETURN(w.ape, ld.floats(p + ".ape", {ratio, width}));
  DSV4_ASSIGN_OR_RETURN(w.norm, ld.floats(p + ".norm.weight", {head_dim}));
  return w;
}

StatusOr<AttentionWeights> load_attention(Loader& ld, const std::string& p, const ModelConfig& c, int ratio) {
  AttentionWeights a;
  a.ratio = ratio;
  const TensorShard& tp = ld.heads();
  const int64_t hd = c.head_dim, heads = c.n_heads, hl = heads / tp.size;
  // Tensor parallelism: this rank's heads (wq_b, attn_sink), output groups
  // (wo_a), wo_b output features and indexer heads; the projections every
  // head reads (wq_a, wkv) split by output features.
  DSV4_ASSIGN_OR_RETURN(auto sink, ld.floats(p + ".attn_sink", {heads}));
  a.attn_sink.assign(sink.begin() + tp.rank * hl, sink.begin() + (tp.rank + 1) * hl);
  DSV4_ASSIGN_OR_RETURN(a.wq_a, ld.linear(p + ".wq_a", c.q_lora_rank, c.dim, ld.share(c.q_lora_rank)));
  DSV4_ASSIGN_OR_RETURN(a.q_norm, ld.floats(p + ".q_norm.weight", {c.q_lora_rank}));
  DSV4_ASSIGN_OR_RETURN(a.wq_b, ld.linear(p + ".wq_b", heads * hd, c.q_lora_rank, ld.share(heads * hd)));
  DSV4_ASSIGN_OR_RETURN(a.wkv, ld.linear(p + ".wkv", hd, c.dim, ld.share(hd)));
  DSV4_ASSIGN_OR_RETURN(a.kv_norm, ld.floats(p + ".kv_norm.weight", {hd}));
  // Fewer groups than ranks: a group's heads span tp / G ranks, each of
  // which holds that group's wo_a.
  const int64_t olr = c.o_lora_rank, G = c.o_groups;
  const int64_t gl = std::max<int64_t>(1, G / tp.size), g0 = G >= tp.size ? tp.rank * gl : tp.rank / (tp.size / G);
  for (int64_t g = g0; g < g0 + gl; ++g) {
    DSV4_ASSIGN_OR_RETURN(Linear group, ld.linear(p + ".wo_a", G * olr, heads * hd / G, {g * olr, olr}));
    a.wo_a.push_back(std::move(group));
  }
  DSV4_ASSIGN_OR_RETURN(a.wo_b, ld.linear(p + ".wo_b", c.dim, G * olr, ld.share(c.dim)));
  if (ratio) {
    DSV4_ASSIGN_OR_RETURN(a.compressor, load_compressor(ld, p + ".compressor", c, ratio, c.head_dim, false));
    if (ratio == 4) {
      IndexerWeights ix;
      const int64_t iq = int64_t{c.index_n_heads} * c.index_head_dim;
      DSV4_ASSIGN_OR_RETURN(ix.wq_b, ld.linear(p + ".indexer.wq_b", iq, c.q_lora_rank, ld.share(iq)));
      DSV4_ASSIGN_OR_RETURN(ix.weights_proj,
                            ld.linear(p + ".indexer.weights_proj", c.index_n_heads, c.dim, ld.share(c.index_n_heads)));
      DSV4_ASSIGN_OR_RETURN(ix.compressor, load_compressor(ld, p + ".indexer.compressor", c, ratio, c.index_head_dim, true));
      a.indexer = std::move(ix);
    }
  }
  return a;
}

StatusOr<ExpertWeights> load_expert(Loader& ld, const std::string& p, const ModelConfig& c, bool split) {
  // The shared expert splits by output features over tensor parallelism:
  // w1/w3 the hidden features, w2 the model dims.
  const int64_t inter = c.moe_inter_dim, dim = c.dim;
  ExpertWeights e;
  DSV4_ASSIGN_OR_RETURN(e.w1, ld.linear(p + ".w1", inter, dim, split ? ld.share(inter) : RowRange{0, inter}));
  DSV4_ASSIGN_OR_RETURN(e.w2, ld.linear(p + ".w2", dim, inter, split ? ld.share(dim) : RowRange{0, dim}));
  DSV4_ASSIGN_OR_RETURN(e.w3, ld.linear(p + ".w3", inter, dim, split ? ld.share(inter) : RowRange{0, inter}));
  return e;
}

StatusOr<MoEWeights> load_moe(Loader& ld, const std::string& p, const ModelConfig& c, bool hash) {
  MoEWeights m;
  m.hash = hash;
  DSV4_ASSIGN_OR_RETURN(m.gate, ld.dense_linear(p + ".gate.weight", c.n_routed_experts, c.dim));
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
    DSV4_ASSIGN_OR_RETURN(auto ex, load_expert(ld, p + ".experts." + std::to_string(e), c, false));
    m.experts.push_back(std::move(ex));
  }
  DSV4_ASSIGN_OR_RETURN(m.shared, load_expert(ld, p + ".shared_experts", c, true));
  return m;
}

StatusOr<HyperConnWeights> load_hc(Loader& ld, const std::string& p, const std::string& which, const ModelConfig& c) {
  HyperConnWeights h;
  DSV4_ASSIGN_OR_RETURN(h.fn, ld.dense_linear(p + "hc_" + which + "_fn", c.mix_hc(), int64_t{c.hc_mult} * c.dim));
  DSV4_ASSIGN_OR_RETURN(h.base, ld.floats(p + "hc_" + which + "_base", {c.mix_hc()}));
  DSV4_ASSIGN_OR_RETURN(h.scale, ld.floats(p + "hc_" + which + "_scale", {3}));
  return h;
}

StatusOr<HcHeadWeights> load_hc_head(Loader& ld, const std::string& p, const ModelConfig& c) {
  HcHeadWeights h;
  DSV4_ASSIGN_OR_RETURN(h.fn, ld.dense_linear(p + "hc_head_fn", c.hc_mult, int64_t{c.hc_mult} * c.dim));
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

Status check_shards(const ModelConfig& c, const WeightLoadOptions& o) {
  const TensorShard& heads = o.heads;
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
  const ExpertShard& experts = o.experts;
  if (experts.size < 1 || experts.rank < 0 || experts.rank >= experts.size || c.n_routed_experts % experts.size)
    return invalid_argument("expert shard " + std::to_string(experts.rank) + " of " + std::to_string(experts.size) +
                            " does not divide the " + std::to_string(c.n_routed_experts) + " routed experts");
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<ModelWeights>> load_weights(const ModelConfig& c, const Checkpoint& ckpt,
                                                     const WeightLoadOptions& options) {
  DSV4_RETURN_IF_ERROR(check_shards(c, options));
  Loader ld(ckpt, options);
  auto w = std::make_unique<ModelWeights>();
  // Embedding and head by vocabulary over tensor parallelism.
  DSV4_ASSIGN_OR_RETURN(w->embed, ld.embedding("embed.weight", c.vocab_size, c.dim, ld.share(c.vocab_size)));
  for (int i = 0; i < c.n_layers; ++i) {
    DSV4_ASSIGN_OR_RETURN(auto b, load_block(ld, "layers." + std::to_string(i) + ".", c, i));
    w->blocks.push_back(std::move(b));
  }
  DSV4_ASSIGN_OR_RETURN(w->norm, ld.floats("norm.weight", {c.dim}));
  DSV4_ASSIGN_OR_RETURN(w->head, ld.linear("head", c.vocab_size, c.dim, ld.share(c.vocab_size)));
  DSV4_ASSIGN_OR_RETURN(w->hc_head, load_hc_head(ld, "", c));
  for (int i = 0; i < c.n_mtp_layers; ++i) {
    const std::string p = "mtp." + std::to_string(i) + ".";
    MtpWeights m;
    DSV4_ASSIGN_OR_RETURN(m.block, load_block(ld, p, c, c.n_layers + i));
    DSV4_ASSIGN_OR_RETURN(m.e_proj, ld.linear(p + "e_proj", c.dim, c.dim, {0, c.dim}));
    DSV4_ASSIGN_OR_RETURN(m.h_proj, ld.linear(p + "h_proj", c.dim, c.dim, {0, c.dim}));
    DSV4_ASSIGN_OR_RETURN(m.enorm, ld.floats(p + "enorm.weight", {c.dim}));
    DSV4_ASSIGN_OR_RETURN(m.hnorm, ld.floats(p + "hnorm.weight", {c.dim}));
    DSV4_ASSIGN_OR_RETURN(m.norm, ld.floats(p + "norm.weight", {c.dim}));
    DSV4_ASSIGN_OR_RETURN(m.hc_head, load_hc_head(ld, p, c));
    w->mtp.push_back(std::move(m));
  }
  if (c.has_dspark()) {
    // The drafter's stages are full blocks (layers n_layers + s, window
    // only, score-routed); stage 0 projects the taps, the last holds the
    // head pieces. Held whole on every rank.
    DSparkWeights d;
    const std::string first = "mtp.0.", last = "mtp." + std::to_string(c.dspark_stages - 1) + ".";
    const int64_t taps = int64_t{c.dspark_taps()} * c.dim, rank = c.dspark_markov_rank;
    DSV4_ASSIGN_OR_RETURN(d.main_proj, ld.linear(first + "main_proj", c.dim, taps, {0, c.dim}));
    DSV4_ASSIGN_OR_RETURN(d.main_norm, ld.floats(first + "main_norm.weight", {c.dim}));
    for (int st = 0; st < c.dspark_stages; ++st) {
      DSV4_ASSIGN_OR_RETURN(auto b, load_block(ld, "mtp." + std::to_string(st) + ".", c, c.n_layers + st));
      d.stages.push_back(std::move(b));
    }
    DSV4_ASSIGN_OR_RETURN(d.norm, ld.floats(last + "norm.weight", {c.dim}));
    DSV4_ASSIGN_OR_RETURN(d.hc_head, load_hc_head(ld, last, c));
    DSV4_ASSIGN_OR_RETURN(d.markov_w1, ld.floats(last + "markov_head.markov_w1.weight", {c.vocab_size, rank}));
    DSV4_ASSIGN_OR_RETURN(d.markov_w2, ld.linear(last + "markov_head.markov_w2", c.vocab_size, rank, {0, c.vocab_size}));
    DSV4_ASSIGN_OR_RETURN(d.confidence, ld.linear(last + "confidence_head.proj", 1, c.dim + rank, {0, 1}));
    w->dspark = std::move(d);
  }
  // Every tensor is checked; now the reads, on every core.
  const uint64_t total = ld.tasks().total_bytes();
  DSV4_RETURN_IF_ERROR(ld.tasks().run(options.progress));
  if (options.progress) options.progress(total, total);
  return w;
}

}  // namespace dsv4
