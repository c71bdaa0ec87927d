#include "checkpoint/v41_loader.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/dtype.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/config_json.h"
#include "model/engram_hash.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/engram_token_map.h"

namespace dsv4 {
namespace {

constexpr int64_t kBlock = V41Linear::kBlock;

// Tells the kernel that bytes [p, p + n) of a file mapping are read by
// scattered rows (the Engram tables): no readahead on a fault.
void read_at_random(const uint8_t* p, uint64_t n) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  madvise(reinterpret_cast<void*>(begin), reinterpret_cast<uintptr_t>(p) + n - begin, MADV_RANDOM);
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Reads tensors by name, each straight into the buffer that keeps it (the
// peak stays the resident weights plus one small tensor's conversion),
// reporting the bytes read against `total`.
class TensorReader {
 public:
  // pack: every linear packed for the fast kernels as soon as it is read
  // (V41Linear::pack_for_fast), so the stored copies never add up.
  TensorReader(const Checkpoint& ckpt, LoadProgress progress, uint64_t total, bool pack)
      : ckpt_(ckpt), progress_(std::move(progress)), total_(total), pack_(pack) {}

  bool has(const std::string& name) const { return ckpt_.find(name) != nullptr; }

  // The tensor's raw bytes into `out` (as many bytes as it has), its shape checked.
  Status read_into(const std::string& name, const std::vector<int64_t>& shape, DType* dtype, void* out, size_t capacity) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(name));
    if (t->shape != shape)
      return invalid_argument("tensor " + name + " has shape " + shape_text(t->shape) + ", the config says " +
                              shape_text(shape));
    if (t->nbytes != capacity)
      return invalid_argument("tensor " + name + " holds " + std::to_string(t->nbytes) + " bytes, its " +
                              dtype_name(t->dtype) + " shape needs " + std::to_string(capacity));
    DSV4_RETURN_IF_ERROR(t->source->read(*t, 0, t->nbytes, out));
    *dtype = t->dtype;
    advance(t->nbytes);
    return Status::Ok();
  }

  // Rows [first, first + count) of a tensor of `shape` (rows first) in one
  // of the dtypes `allowed`, as stored; the rest counted as done.
  template <class Bytes>
  Status rows_of(const std::string& name, const std::vector<int64_t>& shape, std::vector<DType> allowed,
                 int64_t first, int64_t count, Bytes* out) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(name));
    if (t->shape != shape)
      return invalid_argument("tensor " + name + " has shape " + shape_text(t->shape) + ", the config says " +
                              shape_text(shape));
    if (std::find(allowed.begin(), allowed.end(), t->dtype) == allowed.end())
      return invalid_argument("tensor " + name + " is " + dtype_name(t->dtype) + ", expected " +
                              dtype_name(allowed[0]));
    const uint64_t row = shape[0] ? t->nbytes / shape[0] : 0;
    if (row * shape[0] != t->nbytes)
      return invalid_argument("tensor " + name + " holds " + std::to_string(t->nbytes) + " bytes, not whole rows");
    out->resize(row * count);
    DSV4_RETURN_IF_ERROR(t->source->read(*t, row * first, out->size(), out->data()));
    advance(t->nbytes);
    return Status::Ok();
  }

  StatusOr<std::vector<uint8_t>> bytes(const std::string& name, const std::vector<int64_t>& shape, DType* dtype) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(name));
    std::vector<uint8_t> out(t->nbytes);
    DSV4_RETURN_IF_ERROR(read_into(name, shape, dtype, out.data(), out.size()));
    return out;
  }

  // A BF16, F16 or F32 tensor as f32 values.
  StatusOr<std::vector<float>> floats(const std::string& name, const std::vector<int64_t>& shape) {
    DType dt = DType::kF32;  // set by bytes()
    DSV4_ASSIGN_OR_RETURN(std::vector<uint8_t> raw, bytes(name, shape, &dt));
    const size_t n = raw.size() / dtype_size(dt);
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* p = &raw[i * dtype_size(dt)];
      switch (dt) {
        case DType::kF32: std::copy_n(reinterpret_cast<const float*>(p), 1, &out[i]); break;
        case DType::kBF16: out[i] = bf16_to_f32(static_cast<uint16_t>(p[0] | p[1] << 8)); break;
        case DType::kF16: out[i] = f16_to_f32(static_cast<uint16_t>(p[0] | p[1] << 8)); break;
        default: return invalid_argument("tensor " + name + " is " + dtype_name(dt) + ", expected BF16, F16 or F32");
      }
    }
    return out;
  }

  // A tensor left in the file's read-only mapping, its shape and dtype
  // checked (read later by row).
  StatusOr<const uint8_t*> mapped(const std::string& name, const std::vector<int64_t>& shape, DType want) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(name));
    if (t->shape != shape)
      return invalid_argument("tensor " + name + " has shape " + shape_text(t->shape) + ", the config says " +
                              shape_text(shape));
    if (t->dtype != want)
      return invalid_argument("tensor " + name + " is " + dtype_name(t->dtype) + ", expected " + dtype_name(want));
    if (!t->data) return internal_error("tensor " + name + " is not mapped from its file");
    return t->data;
  }

  // A linear stored as `prefix.weight` (+ `prefix.scale`), held as stored
  // (as_stored), or packed for the fast kernels when the reader packs. Only
  // its output features [first, first + count) are read (a tensor-parallel
  // rank's block; count -1: all of them).
  StatusOr<V41Linear> linear(const std::string& prefix, int64_t out, int64_t in, int64_t first = 0,
                             int64_t count = -1) {
    DSV4_ASSIGN_OR_RETURN(V41Linear l, as_stored(prefix, out, in, first, count));
    if (pack_) l.pack_for_fast();
    return l;
  }

  // FP8, FP4, BF16 or F32, as the file stores it.
  StatusOr<V41Linear> as_stored(const std::string& prefix, int64_t out, int64_t in, int64_t first, int64_t count) {
    if (count < 0) count = out - first;
    V41Linear l;
    l.out = count;
    l.in = in;
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(prefix + ".weight"));
    if (t->dtype == DType::kF8E4M3 || t->dtype == DType::kI8 || t->dtype == DType::kU8) {
      const bool fp4 = t->dtype != DType::kF8E4M3;
      if (in % kBlock) return invalid_argument(prefix + ": " + std::to_string(in) + " inputs are not whole blocks of 32");
      l.kind = fp4 ? V41Linear::Kind::kFp4 : V41Linear::Kind::kFp8;
      DSV4_RETURN_IF_ERROR(rows_of(prefix + ".weight", {out, fp4 ? in / 2 : in}, {t->dtype}, first, count, &l.codes));
      // FP8 scales are per 32 x 32 tile: a block starts on a tile.
      const int64_t tile = fp4 ? 1 : kBlock;
      if (first % tile) return internal_error(prefix + ": a block of output features starts inside a 32-row tile");
      DSV4_RETURN_IF_ERROR(rows_of(prefix + ".scale", {(out + tile - 1) / tile, in / kBlock}, {DType::kF8E8M0},
                                   first / tile, (first + count + tile - 1) / tile - first / tile, &l.scale));
      for (uint8_t b : l.scale)
        if (b == 0xFF) return invalid_argument("tensor " + prefix + ".scale holds a NaN scale (0xFF)");
      return l;
    }
    if (t->dtype == DType::kBF16) {
      l.kind = V41Linear::Kind::kBf16;
      ScratchVector<uint8_t> raw;
      DSV4_RETURN_IF_ERROR(rows_of(prefix + ".weight", {out, in}, {DType::kBF16}, first, count, &raw));
      l.bf16.resize(count * in);
      std::memcpy(l.bf16.data(), raw.data(), raw.size());
      return l;
    }
    DSV4_ASSIGN_OR_RETURN(std::vector<float> all, floats(prefix + ".weight", {out, in}));
    l.f32.assign(all.begin() + first * in, all.begin() + (first + count) * in);
    return l;
  }

  // A linear whose output features a tensor-parallel group splits: this
  // rank's block when the features divide into whole blocks (of 32-row
  // tiles for FP8), else all of it (l.parts 1: every rank computes it whole).
  StatusOr<V41Linear> columns(const std::string& prefix, int64_t out, int64_t in, TensorShard tp) {
    DSV4_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt_.get(prefix + ".weight"));
    const int64_t part = out / tp.size, tile = t->dtype == DType::kF8E4M3 ? kBlock : 1;
    if (tp.size == 1 || out % tp.size || part % tile) return linear(prefix, out, in);
    DSV4_ASSIGN_OR_RETURN(V41Linear l, linear(prefix, out, in, tp.rank * part, part));
    l.parts = tp.size;
    return l;
  }

  // Bytes of tensors this rank does not hold (another rank's experts),
  // counted as done for the progress.
  void skip(const std::string& name) {
    if (const TensorInfo* t = ckpt_.find(name)) advance(t->nbytes);
  }

  // A lookup table (read by row): BF16, F16 or F32 only, its rows being
  // the values themselves.
  StatusOr<V41Linear> table(const std::string& prefix, int64_t rows, int64_t dim) {
    DSV4_ASSIGN_OR_RETURN(V41Linear l, as_stored(prefix, rows, dim, 0, -1));
    if (l.kind == V41Linear::Kind::kFp8 || l.kind == V41Linear::Kind::kFp4)
      return invalid_argument("tensor " + prefix + ".weight is a lookup table and must be BF16 or F32, not " +
                              std::string(l.kind == V41Linear::Kind::kFp8 ? "FP8" : "FP4"));
    return l;
  }

  // A linear the reference uses dequantized (wo_a): FP8 codes times their
  // tile's scale in a plain product, or plain. Packed only when its groups
  // of group_rows fill whole panels (it is multiplied a group at a time).
  StatusOr<V41Linear> dequantized(const std::string& prefix, int64_t out, int64_t in, int64_t first, int64_t count,
                                  int64_t group_rows) {
    DSV4_ASSIGN_OR_RETURN(V41Linear l, as_stored(prefix, out, in, first, count));
    if (l.kind == V41Linear::Kind::kFp4) return invalid_argument(prefix + " is FP4; the reference dequantizes only FP8 here");
    l.dequantized = l.kind == V41Linear::Kind::kFp8;
    if (pack_ && group_rows % kernels::kPanel == 0) l.pack_for_fast();
    return l;
  }

 private:
  void advance(uint64_t n) {
    done_ += n;
    if (progress_) progress_(std::min(done_, total_), total_);
  }

  const Checkpoint& ckpt_;
  LoadProgress progress_;
  uint64_t total_ = 0, done_ = 0;
  bool pack_ = false;
};

#define ASSIGN(lhs, expr) DSV4_ASSIGN_OR_RETURN(lhs, expr)

// Under tensor parallelism a rank holds its block of the query heads (their
// wq_b rows and sinks) and of the output groups (a group whole when it
// spans several ranks); the other linears split by output features where
// they divide evenly (TensorReader::columns).
Status load_attention(TensorReader& r, const ModelConfig& c, int layer, const std::string& p, TensorShard tp,
                      V41Attention* a) {
  const int64_t dim = c.dim, hd = c.head_dim, H = c.n_heads, G = c.o_groups, ol = c.o_lora_rank;
  const int64_t heads = H / tp.size, h0 = tp.rank * heads;
  const int64_t groups = std::max<int64_t>(1, G / tp.size);
  const int64_t g0 = G >= tp.size ? tp.rank * groups : tp.rank / (tp.size / G);
  a->ratio = c.compress_ratio(layer);
  std::vector<float> sinks;
  ASSIGN(sinks, r.floats(p + "attn_sink", {H}));
  a->attn_sink.assign(sinks.begin() + h0, sinks.begin() + h0 + heads);
  ASSIGN(a->wq_a, r.columns(p + "wq_a", c.q_lora_rank, dim, tp));
  ASSIGN(a->q_norm, r.floats(p + "q_norm.weight", {c.q_lora_rank}));
  ASSIGN(a->wq_b, r.linear(p + "wq_b", H * hd, c.q_lora_rank, h0 * hd, heads * hd));
  ASSIGN(a->wkv, r.columns(p + "wkv", hd, dim, tp));
  ASSIGN(a->kv_norm, r.floats(p + "kv_norm.weight", {hd}));
  ASSIGN(a->wo_a, r.dequantized(p + "wo_a", G * ol, H * hd / G, g0 * ol, groups * ol, ol));
  ASSIGN(a->wo_b, r.columns(p + "wo_b", dim, G * ol, tp));
  const SharedSources& s = c.shared;
  const bool backbone = layer < c.n_layers;
  const bool kv_source = backbone && std::count(s.kv_source_layers.begin(), s.kv_source_layers.end(), layer);
  const bool index_source = backbone && std::count(s.index_source_layers.begin(), s.index_source_layers.end(), layer);
  if (kv_source) {
    V41Compressor& comp = a->compressor.emplace();
    comp.ratio = a->ratio;
    ASSIGN(comp.wkv, r.columns(p + "compressor.wkv", hd, dim, tp));
    if (comp.ratio > 1) {
      ASSIGN(comp.wgate, r.columns(p + "compressor.wgate", hd, dim, tp));
    }
    ASSIGN(comp.norm, r.floats(p + "compressor.norm.weight", {hd}));
  }
  if (index_source) {
    V41Indexer& ix = a->indexer.emplace();
    const int64_t ih = c.index_n_heads, id = c.index_head_dim;
    ASSIGN(ix.wq_b, r.columns(p + "indexer.wq_b", ih * id, c.q_lora_rank, tp));
    ASSIGN(ix.weights_proj, r.columns(p + "indexer.weights_proj", ih, dim, tp));
    ix.owns_keys = kv_source;
    if (kv_source) {  // one latent at a time: whole on every rank
      ASSIGN(ix.wk, r.linear(p + "indexer.wk", id, hd));
      ASSIGN(ix.k_norm, r.floats(p + "indexer.k_norm.weight", {id}));
    }
  }
  return Status::Ok();
}

// A routed expert is whole on the rank holding it (tp of size 1); the
// shared expert splits its linears' output features over the group.
Status load_expert(TensorReader& r, const std::string& p, int64_t dim, int64_t inter, TensorShard tp, V41Expert* e) {
  ASSIGN(e->w1, r.columns(p + "w1", inter, dim, tp));
  ASSIGN(e->w2, r.columns(p + "w2", dim, inter, tp));
  ASSIGN(e->w3, r.columns(p + "w3", inter, dim, tp));
  return Status::Ok();
}

void skip_expert(TensorReader& r, const std::string& p) {
  for (const char* w : {"w1", "w2", "w3"})
    for (const char* part : {".weight", ".scale"}) r.skip(p + w + part);
}

Status load_engram(TensorReader& r, const ModelConfig& c, int which, const std::string& p, TensorShard tp,
                   V41Engram* g) {
  const EngramConfig& e = c.engram;
  g->rows = e.num_embeddings[which];
  g->head_dim = e.head_dim;
  ASSIGN(g->codes, r.mapped(p + "embed.weight", {g->rows, g->head_dim}, DType::kF8E4M3));
  ASSIGN(g->scales, r.mapped(p + "embed.scale", {g->rows, g->head_dim / kBlock}, DType::kF8E8M0));
  // Read a few rows at a time anywhere: no readahead around each miss.
  read_at_random(g->codes, static_cast<uint64_t>(g->rows * g->head_dim));
  read_at_random(g->scales, static_cast<uint64_t>(g->rows * (g->head_dim / kBlock)));
  ASSIGN(g->wkv, r.columns(p + "wkv", static_cast<int64_t>(c.dim) * (c.hc_mult + 1),
                           static_cast<int64_t>(e.hash_columns()) * e.head_dim, tp));
  std::vector<float> q, k;
  ASSIGN(q, r.floats(p + "q_weight", {c.hc_mult, c.dim}));
  ASSIGN(k, r.floats(p + "k_weight", {c.hc_mult, c.dim}));
  g->qk.resize(q.size());
  for (size_t i = 0; i < q.size(); ++i) g->qk[i] = q[i] * k[i];
  return Status::Ok();
}

// Block `layer` stored below prefix p (layers.N. or, for a DSpark stage, mtp.S.).
Status load_block(TensorReader& r, const ModelConfig& c, int layer, const std::string& p, RankShards shards,
                  V41Block* b) {
  const ExpertShard shard = shards.experts;
  const int64_t dim = c.dim, mix = c.mix_hc(), flat = static_cast<int64_t>(c.hc_mult) * dim;
  DSV4_RETURN_IF_ERROR(load_attention(r, c, layer, p + "attn.", shards.tensor, &b->attn));
  ASSIGN(b->attn_norm, r.floats(p + "attn_norm.weight", {dim}));
  ASSIGN(b->ffn_norm, r.floats(p + "ffn_norm.weight", {dim}));
  for (auto [name, hc] : {std::pair{"hc_attn", &b->hc_attn}, std::pair{"hc_ffn", &b->hc_ffn}}) {
    std::vector<float> fn;
    ASSIGN(fn, r.floats(p + name + "_fn", {mix, flat}));
    hc->fn = Linear::dense(std::move(fn), mix, flat);
    hc->fn.pack();
    ASSIGN(hc->base, r.floats(p + name + "_base", {mix}));
    ASSIGN(hc->scale, r.floats(p + name + "_scale", {3}));
  }
  const bool stage = layer >= c.n_layers;
  const int64_t E = stage && c.dspark_n_routed_experts ? c.dspark_n_routed_experts : c.n_routed_experts;
  ASSIGN(b->ffn.gate, r.linear(p + "ffn.gate", E, dim));
  ASSIGN(b->ffn.gate_bias, r.floats(p + "ffn.gate.bias", {E}));
  if (E % shard.size != 0)
    return invalid_argument(p + "ffn has " + std::to_string(E) + " routed experts, which " +
                            std::to_string(shard.size) + " expert-parallel ranks cannot split evenly");
  // This rank's block of the routed experts; the others stay empty.
  b->ffn.experts.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    const std::string name = p + "ffn.experts." + std::to_string(e) + ".";
    if (shard.owns(static_cast<int>(e), static_cast<int>(E)))
      DSV4_RETURN_IF_ERROR(load_expert(r, name, dim, c.moe_inter_dim, {}, &b->ffn.experts[e]));
    else
      skip_expert(r, name);
  }
  DSV4_RETURN_IF_ERROR(load_expert(r, p + "ffn.shared_experts.", dim, c.moe_inter_dim, shards.tensor, &b->ffn.shared));
  const auto& ids = c.engram.layer_ids;
  const auto it = std::find(ids.begin(), ids.end(), layer);
  if (it != ids.end())
    DSV4_RETURN_IF_ERROR(
        load_engram(r, c, static_cast<int>(it - ids.begin()), p + "engram.", shards.tensor, &b->engram.emplace()));
  return Status::Ok();
}

Status load_dspark(TensorReader& r, const ModelConfig& c, RankShards shards, V41DSpark* d) {
  const int64_t dim = c.dim, rank = c.dspark_markov_rank, V = c.vocab_size;
  ASSIGN(d->main_proj, r.columns("mtp.0.main_proj", dim, c.dspark_taps() * dim, shards.tensor));
  ASSIGN(d->main_norm, r.floats("mtp.0.main_norm.weight", {dim}));
  d->stages.resize(c.dspark_stages);
  for (int s = 0; s < c.dspark_stages; ++s)
    DSV4_RETURN_IF_ERROR(load_block(r, c, c.n_layers + s, "mtp." + std::to_string(s) + ".", shards, &d->stages[s]));
  const std::string last = "mtp." + std::to_string(c.dspark_stages - 1) + ".";
  ASSIGN(d->norm, r.floats(last + "norm.weight", {dim}));
  ASSIGN(d->markov_embed, r.table(last + "markov_head.embed", V, rank));
  ASSIGN(d->markov_head, r.linear(last + "markov_head.head", V, rank));
  ASSIGN(d->confidence, r.linear(last + "confidence_head.proj", 1, dim + rank));
  return Status::Ok();
}

}  // namespace

void V41Engram::row(int64_t r, float* out) const {
  for (int64_t i = 0; i < head_dim; ++i)
    out[i] = e4m3_to_f32(codes[r * head_dim + i]) * e8m0_to_f32(scales[r * (head_dim / V41Linear::kBlock) + i / V41Linear::kBlock]);
}

StatusOr<std::unique_ptr<V41Weights>> load_v41_weights(const std::string& dir, const ModelConfig& c,
                                                       const LoadProgress& progress, RankShards shards,
                                                       kernels::Numerics numerics) {
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> opened, Checkpoint::open(dir));
  std::shared_ptr<const Checkpoint> ckpt(std::move(opened));
  // Everything is read but the Engram tables, which stay mapped.
  uint64_t mapped = 0;
  for (int64_t rows : c.engram.num_embeddings)
    mapped += static_cast<uint64_t>(rows) * (c.engram.head_dim + c.engram.head_dim / kBlock);
  const uint64_t total = ckpt->total_bytes();
  TensorReader r(*ckpt, progress, total > mapped ? total - mapped : total, numerics == kernels::Numerics::kFast);
  auto w = std::make_unique<V41Weights>();
  w->files = ckpt;
  ASSIGN(w->embed, r.table("embed", c.vocab_size, c.dim));
  ASSIGN(w->norm, r.floats("norm.weight", {c.dim}));
  ASSIGN(w->head, r.columns("head", c.vocab_size, c.dim, shards.tensor));
  w->blocks.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i)
    DSV4_RETURN_IF_ERROR(load_block(r, c, i, "layers." + std::to_string(i) + ".", shards, &w->blocks[i]));
  if (c.has_dspark()) DSV4_RETURN_IF_ERROR(load_dspark(r, c, shards, &w->dspark.emplace()));
  return w;
}

StatusOr<std::unique_ptr<DeepseekV41>> load_deepseek_v41(const std::string& dir, const LoadProgress& progress,
                                                         RankShards shards, kernels::Numerics numerics) {
  DSV4_ASSIGN_OR_RETURN(ModelConfig config, load_any_model_config(dir + "/config.json"));
  if (config.family != ModelFamily::kV41)
    return invalid_argument(dir + "/config.json is not a DeepSeek-V4.1 config (model_type deepseek_v41)");
  EngramTokenMap map;
  if (config.engram.enabled()) {
    auto tokenizer = BpeTokenizer::load(dir);
    if (!tokenizer.ok())
      return Status(tokenizer.status().code(), "DeepSeek-V4.1's Engram needs the checkpoint's tokenizer: " +
                                                   tokenizer.status().message());
    DSV4_ASSIGN_OR_RETURN(map, engram_token_map(**tokenizer, config.engram.compressed_vocab_size));
    if (config.engram.pad_id < 0 || config.engram.pad_id >= static_cast<int>(map.compressed.size()))
      return invalid_argument("engram_pad_token_id " + std::to_string(config.engram.pad_id) +
                              " is not a token of the checkpoint's tokenizer");
    // Ids the tokenizer does not have (the model's vocabulary is padded past
    // it) take part in n-grams as the pad token does.
    if (static_cast<int64_t>(map.compressed.size()) < config.vocab_size)
      map.compressed.resize(config.vocab_size, map.compressed[config.engram.pad_id]);
    // Every hashed row must fall inside its table.
    const EngramHashLayout layout =
        engram_hash_layout(config.engram, map.size, map.compressed[config.engram.pad_id]);
    for (size_t i = 0; i < layout.primes.size(); ++i) {
      const int64_t end = layout.offsets[i].back() + layout.primes[i].back();
      if (end > config.engram.num_embeddings[i])
        return invalid_argument("Engram layer " + std::to_string(config.engram.layer_ids[i]) + " hashes into " +
                                std::to_string(end) + " rows, its table (engram_num_embeddings) has " +
                                std::to_string(config.engram.num_embeddings[i]));
    }
  }
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<V41Weights> weights,
                        load_v41_weights(dir, config, progress, shards, numerics));
  auto model =
      std::make_unique<DeepseekV41>(std::move(config), std::move(weights), std::move(map.compressed), map.size);
  if (numerics == kernels::Numerics::kFast) model->use_fast_numerics();  // packed already: marks the model
  return model;
}

#undef ASSIGN

}  // namespace dsv4
