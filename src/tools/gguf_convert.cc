#include "tools/gguf_convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "model/config.h"
#include "tools/gguf_writer.h"
#include "checkpoint/released_linear.h"
#include "checkpoint/config_json.h"

namespace dsv4 {
namespace {

// ggml dims are innermost first: the reverse of the torch shape.
std::vector<int64_t> ggml_dims(const std::vector<int64_t>& shape) { return {shape.rbegin(), shape.rend()}; }

// llama.cpp's reference Q8_0: d = amax / 127 (stored as f16), codes
// round(x / d) half away from zero, computed with the f32 d.
void quantize_q8_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d16 = f32_to_f16(d);
    std::memcpy(out, &d16, 2);
    for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
  }
}

// An FP4 row (pairs of e2m1 codes, element 2k in the low nibble of byte k,
// one e8m0 scale per 32) as MXFP4 blocks: the scale byte, then 16 bytes
// whose low nibbles hold elements 0-15 and high nibbles elements 16-31.
void repack_mxfp4(const uint8_t* codes, const uint8_t* scales, int64_t in, uint8_t* out) {
  for (int64_t b = 0; b < in / 32; ++b, codes += 16, out += 17) {
    uint8_t v[32];
    for (int k = 0; k < 16; ++k) v[2 * k] = codes[k] & 0xF, v[2 * k + 1] = codes[k] >> 4;
    out[0] = scales[b];
    for (int j = 0; j < 16; ++j) out[1 + j] = static_cast<uint8_t>(v[j] | (v[j + 16] << 4));
  }
}

class Converter {
 public:
  Converter(const Checkpoint& ckpt, GgufWriter& w, GgufConvertReport& r) : ckpt_(ckpt), w_(w), r_(r) {}

  // A tensor in its GGUF type: FP8 linears to Q8_0, BF16 matrices kept,
  // every 1-D tensor and F32 tensor as F32, I64 tables as I32.
  Status tensor(const std::string& gguf, const std::string& source) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(source));
    r_.bytes_in += t->nbytes;
    ++r_.tensors;
    DSV4_ASSIGN_OR_RETURN(auto linear, released_linear(ckpt_, source));
    if (linear) {
      if (linear->fp4) return invalid_argument("tensor '" + source + "' is FP4 outside the routed experts");
      r_.bytes_in += linear->scale->nbytes;
      ++r_.q8_0;
      const ReleasedLinear q = *linear;
      w_.add_tensor(gguf, GgmlType::kQ8_0, {q.in, q.out}, [q](const GgufWriter::Emit& emit) {
        return emit_q8_0_rows(q.out, q.in, [&q](int64_t r, float* row) { dequantize_row(q, r, row); }, emit);
      });
      return Status::Ok();
    }
    const std::vector<int64_t> dims = ggml_dims(t->shape);
    ++r_.copied;
    switch (t->dtype) {
      case DType::kF32:
        w_.add_tensor(gguf, GgmlType::kF32, dims, [t](const GgufWriter::Emit& emit) {
          emit(t->data, t->nbytes);
          return Status::Ok();
        });
        return Status::Ok();
      case DType::kBF16:
        if (t->shape.size() >= 2) {
          w_.add_tensor(gguf, GgmlType::kBF16, dims, [t](const GgufWriter::Emit& emit) {
            emit(t->data, t->nbytes);
            return Status::Ok();
          });
        } else {
          w_.add_tensor(gguf, GgmlType::kF32, dims, [t](const GgufWriter::Emit& emit) {
            std::vector<float> v(t->numel());
            for (int64_t i = 0; i < t->numel(); ++i) {
              uint16_t b;
              std::memcpy(&b, t->data + 2 * i, 2);
              v[i] = bf16_to_f32(b);
            }
            emit(v.data(), v.size() * 4);
            return Status::Ok();
          });
        }
        return Status::Ok();
      case DType::kI64:
        w_.add_tensor(gguf, GgmlType::kI32, dims, [t, source](const GgufWriter::Emit& emit) {
          std::vector<int32_t> v(t->numel());
          for (int64_t i = 0; i < t->numel(); ++i) {
            int64_t x;
            std::memcpy(&x, t->data + 8 * i, 8);
            if (x < INT32_MIN || x > INT32_MAX) return data_loss("tensor '" + source + "' has a value beyond int32");
            v[i] = static_cast<int32_t>(x);
          }
          emit(v.data(), v.size() * 4);
          return Status::Ok();
        });
        return Status::Ok();
      default:
        return invalid_argument("tensor '" + source + "' is " + dtype_name(t->dtype) +
                                ", which the GGUF converter does not take (a released FP8/FP4 checkpoint is needed)");
    }
  }

  // The routed experts of one projection (w1, w2 or w3), stacked expert-major
  // into one 3-D tensor {in, out, experts}: FP4 as MXFP4, FP8 as Q8_0.
  Status experts(const std::string& gguf, const std::string& prefix, int n_experts, const std::string& w) {
    std::vector<ReleasedLinear> parts;
    for (int e = 0; e < n_experts; ++e) {
      const std::string name = prefix + ".experts." + std::to_string(e) + "." + w + ".weight";
      DSV4_ASSIGN_OR_RETURN(auto q, released_linear(ckpt_, name));
      if (!q) {
        DSV4_RETURN_IF_ERROR(ckpt_.get(name).status());
        return invalid_argument("tensor '" + name + "' is not an FP8/FP4 linear with a .scale");
      }
      if (!parts.empty() && (q->fp4 != parts[0].fp4 || q->out != parts[0].out || q->in != parts[0].in))
        return invalid_argument("tensor '" + name + "' differs in format or shape from expert 0's");
      if (q->fp4 && q->scale->dtype != DType::kF8E8M0)
        return invalid_argument("tensor '" + name + "' has " + dtype_name(q->scale->dtype) +
                                " scales; MXFP4 needs e8m0 scales");
      r_.bytes_in += q->weight->nbytes + q->scale->nbytes;
      parts.push_back(*q);
    }
    ++r_.tensors;
    const ReleasedLinear& p0 = parts[0];
    const std::vector<int64_t> dims = {p0.in, p0.out, n_experts};
    if (p0.fp4) {
      ++r_.mxfp4;
      w_.add_tensor(gguf, GgmlType::kMXFP4, dims, [parts](const GgufWriter::Emit& emit) {
        for (const ReleasedLinear& q : parts) {
          std::vector<uint8_t> out(q.out * (q.in / 32) * 17);
          parallel_for(q.out, 64, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r)
              repack_mxfp4(q.weight->data + r * (q.in / 2), q.scale->data + r * (q.in / 32), q.in,
                           out.data() + r * (q.in / 32) * 17);
          });
          emit(out.data(), out.size());
        }
        return Status::Ok();
      });
    } else {
      ++r_.q8_0;
      w_.add_tensor(gguf, GgmlType::kQ8_0, dims, [parts](const GgufWriter::Emit& emit) {
        for (const ReleasedLinear& q : parts)
          DSV4_RETURN_IF_ERROR(
              emit_q8_0_rows(q.out, q.in, [&q](int64_t r, float* row) { dequantize_row(q, r, row); }, emit));
        return Status::Ok();
      });
    }
    return Status::Ok();
  }

 private:
  // Rows dequantized by `row_of`, requantized to Q8_0 in parallel, emitted
  // in order.
  static Status emit_q8_0_rows(int64_t rows, int64_t in, const std::function<void(int64_t, float*)>& row_of,
                               const GgufWriter::Emit& emit) {
    if (in % 32) return invalid_argument("Q8_0 needs rows that are a multiple of 32 long");
    const int64_t row_bytes = in / 32 * 34, step = 256;
    std::vector<uint8_t> out(step * row_bytes);
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
      const int64_t n = std::min(step, rows - r0);
      parallel_for(n, 16, [&](int64_t a, int64_t b) {
        std::vector<float> row(in);
        for (int64_t i = a; i < b; ++i) {
          row_of(r0 + i, row.data());
          quantize_q8_0(row.data(), in, out.data() + i * row_bytes);
        }
      });
      emit(out.data(), n * row_bytes);
    }
    return Status::Ok();
  }

  const Checkpoint& ckpt_;
  GgufWriter& w_;
  GgufConvertReport& r_;
};

// The `deepseek4.*` metadata llama.cpp's loader requires.
Status write_metadata(const ModelConfig& c, GgufWriter& w) {
  if (c.hc_mult != 4) return invalid_argument("llama.cpp's deepseek4 graph needs hc_mult 4, this model has " +
                                              std::to_string(c.hc_mult));
  if (c.score_func != ScoreFunc::kSqrtSoftplus)
    return invalid_argument("llama.cpp's deepseek4 loader takes only sqrtsoftplus expert scoring");
  for (int i = 0; i < c.n_layers; ++i)
    if (c.compress_ratios[i] != 0 && c.compress_ratios[i] != 4 && c.compress_ratios[i] != 128)
      return invalid_argument("llama.cpp's deepseek4 loader takes compress ratios 0, 4 and 128; layer " +
                              std::to_string(i) + " has " + std::to_string(c.compress_ratios[i]));
  const std::string a = "deepseek4.";
  w.set_string("general.architecture", "deepseek4");
  w.set_string("general.name", "DeepSeek-V4 (converted by dsv4)");
  w.set_u32("general.file_type", 38);  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
  w.set_u32("general.alignment", 32);
  w.set_string("tokenizer.ggml.model", "none");
  w.set_u32(a + "vocab_size", c.vocab_size);
  w.set_u32(a + "context_length", c.max_position_embeddings);
  w.set_u32(a + "embedding_length", c.dim);
  w.set_u32(a + "block_count", c.n_layers);
  w.set_u32(a + "attention.head_count", c.n_heads);
  w.set_u32(a + "attention.head_count_kv", 1);
  w.set_u32(a + "attention.key_length", c.head_dim);
  w.set_u32(a + "attention.value_length", c.head_dim);
  w.set_u32(a + "rope.dimension_count", c.rope_head_dim);
  w.set_f32(a + "rope.freq_base", c.rope_theta);
  if (c.original_seq_len > 0) {
    w.set_string(a + "rope.scaling.type", "yarn");
    w.set_f32(a + "rope.scaling.factor", c.rope_factor);
    w.set_u32(a + "rope.scaling.original_context_length", c.original_seq_len);
    w.set_f32(a + "rope.scaling.yarn_beta_fast", c.beta_fast);
    w.set_f32(a + "rope.scaling.yarn_beta_slow", c.beta_slow);
  }
  w.set_f32(a + "attention.layer_norm_rms_epsilon", c.norm_eps);
  w.set_u32(a + "attention.q_lora_rank", c.q_lora_rank);
  w.set_u32(a + "attention.sliding_window", c.window_size);
  w.set_u32(a + "attention.output_group_count", c.o_groups);
  w.set_u32(a + "attention.output_lora_rank", c.o_lora_rank);
  w.set_i32_array(a + "attention.compress_ratios",
                  std::vector<int32_t>(c.compress_ratios.begin(), c.compress_ratios.begin() + c.n_layers));
  w.set_f32(a + "attention.compress_rope_freq_base", c.compress_rope_theta);
  w.set_u32(a + "attention.indexer.head_count", c.index_n_heads);
  w.set_u32(a + "attention.indexer.key_length", c.index_head_dim);
  w.set_u32(a + "attention.indexer.top_k", c.index_topk);
  w.set_u32(a + "expert_count", c.n_routed_experts);
  w.set_u32(a + "expert_used_count", c.n_activated_experts);
  w.set_u32(a + "expert_feed_forward_length", c.moe_inter_dim);
  w.set_u32(a + "expert_shared_count", c.n_shared_experts);
  w.set_f32(a + "expert_weights_scale", c.route_scale);
  w.set_bool(a + "expert_weights_norm", true);
  w.set_u32(a + "expert_gating_func", 4);  // LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS
  // Both the routed and the shared experts clamp their SwiGLU (moe.cc).
  w.set_f32(a + "swiglu_clamp_exp", c.swiglu_limit);
  w.set_f32(a + "swiglu_clamp_shexp", c.swiglu_limit);
  w.set_u32(a + "hyper_connection.count", c.hc_mult);
  w.set_u32(a + "hyper_connection.sinkhorn_iterations", c.hc_sinkhorn_iters);
  w.set_f32(a + "hyper_connection.epsilon", c.hc_eps);
  w.set_u32(a + "hash_layer_count", c.n_hash_layers);
  return Status::Ok();
}

Status add_tensors(const ModelConfig& c, Converter& cv) {
  DSV4_RETURN_IF_ERROR(cv.tensor("token_embd.weight", "embed.weight"));
  DSV4_RETURN_IF_ERROR(cv.tensor("output_norm.weight", "norm.weight"));
  DSV4_RETURN_IF_ERROR(cv.tensor("output.weight", "head.weight"));
  DSV4_RETURN_IF_ERROR(cv.tensor("output_hc_fn.weight", "hc_head_fn"));
  DSV4_RETURN_IF_ERROR(cv.tensor("output_hc_base.weight", "hc_head_base"));
  DSV4_RETURN_IF_ERROR(cv.tensor("output_hc_scale.weight", "hc_head_scale"));
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string src = "layers." + std::to_string(i) + ".", dst = "blk." + std::to_string(i) + ".";
    const std::pair<const char*, const char*> common[] = {
        {"attn_norm.weight", "attn_norm.weight"},     {"attn_sinks.weight", "attn.attn_sink"},
        {"attn_q_a.weight", "attn.wq_a.weight"},      {"attn_q_a_norm.weight", "attn.q_norm.weight"},
        {"attn_q_b.weight", "attn.wq_b.weight"},      {"attn_kv.weight", "attn.wkv.weight"},
        {"attn_kv_a_norm.weight", "attn.kv_norm.weight"}, {"attn_output_a.weight", "attn.wo_a.weight"},
        {"attn_output_b.weight", "attn.wo_b.weight"}, {"hc_attn_fn.weight", "hc_attn_fn"},
        {"hc_attn_base.weight", "hc_attn_base"},      {"hc_attn_scale.weight", "hc_attn_scale"},
        {"hc_ffn_fn.weight", "hc_ffn_fn"},            {"hc_ffn_base.weight", "hc_ffn_base"},
        {"hc_ffn_scale.weight", "hc_ffn_scale"},      {"ffn_norm.weight", "ffn_norm.weight"},
        {"ffn_gate_inp.weight", "ffn.gate.weight"},   {"ffn_gate_shexp.weight", "ffn.shared_experts.w1.weight"},
        {"ffn_up_shexp.weight", "ffn.shared_experts.w3.weight"},
        {"ffn_down_shexp.weight", "ffn.shared_experts.w2.weight"},
    };
    for (const auto& [to, from] : common) DSV4_RETURN_IF_ERROR(cv.tensor(dst + to, src + from));
    const int ratio = c.compress_ratios[i];
    if (ratio != 0) {
      DSV4_RETURN_IF_ERROR(cv.tensor(dst + "attn_compressor_kv.weight", src + "attn.compressor.wkv.weight"));
      DSV4_RETURN_IF_ERROR(cv.tensor(dst + "attn_compressor_gate.weight", src + "attn.compressor.wgate.weight"));
      DSV4_RETURN_IF_ERROR(cv.tensor(dst + "attn_compressor_ape.weight", src + "attn.compressor.ape"));
      DSV4_RETURN_IF_ERROR(cv.tensor(dst + "attn_compressor_norm.weight", src + "attn.compressor.norm.weight"));
    }
    if (ratio == 4) {
      const std::string ix = src + "attn.indexer.";
      DSV4_RETURN_IF_ERROR(cv.tensor(dst + "indexer.attn_q_b.weight", ix + "wq_b.weight"));
      DSV4_RETURN_IF_ERROR(cv.tensor(dst + "indexer.proj.weight", ix + "weights_proj.weight"));
      DSV4_RETURN_IF_ERROR(cv.tensor(dst + "indexer_compressor_kv.weight", ix + "compressor.wkv.weight"));
      DSV4_RETURN_IF_ERROR(cv.tensor(dst + "indexer_compressor_gate.weight", ix + "compressor.wgate.weight"));
      DSV4_RETURN_IF_ERROR(cv.tensor(dst + "indexer_compressor_ape.weight", ix + "compressor.ape"));
      DSV4_RETURN_IF_ERROR(cv.tensor(dst + "indexer_compressor_norm.weight", ix + "compressor.norm.weight"));
    }
    if (c.is_hash_layer(i)) DSV4_RETURN_IF_ERROR(cv.tensor(dst + "ffn_gate_tid2eid.weight", src + "ffn.gate.tid2eid"));
    else DSV4_RETURN_IF_ERROR(cv.tensor(dst + "exp_probs_b.bias", src + "ffn.gate.bias"));
    DSV4_RETURN_IF_ERROR(cv.experts(dst + "ffn_gate_exps.weight", src + "ffn", c.n_routed_experts, "w1"));
    DSV4_RETURN_IF_ERROR(cv.experts(dst + "ffn_up_exps.weight", src + "ffn", c.n_routed_experts, "w3"));
    DSV4_RETURN_IF_ERROR(cv.experts(dst + "ffn_down_exps.weight", src + "ffn", c.n_routed_experts, "w2"));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<GgufConvertReport> convert_to_gguf(const GgufConvertOptions& opt) {
  DSV4_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::open(opt.input_dir));
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(opt.input_dir + "/config.json"));
  GgufConvertReport report;
  GgufWriter writer;
  DSV4_RETURN_IF_ERROR(write_metadata(config, writer));
  Converter converter(*ckpt, writer, report);
  DSV4_RETURN_IF_ERROR(add_tensors(config, converter));
  for (const SafetensorsFile* shard : ckpt->shards())
    for (const auto& [name, info] : shard->tensors())
      if (name.rfind("mtp.", 0) == 0) ++report.mtp_tensors_left_out;
  report.bytes_out = writer.data_bytes();
  DSV4_RETURN_IF_ERROR(writer.write(opt.output_path));
  return report;
}

}  // namespace dsv4
