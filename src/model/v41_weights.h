// DeepSeek-V4.1's parameters, grouped as its blocks use them. Names in
// comments are the released checkpoint's, below `layers.N.`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "model/v41_linear.h"
#include "model/weights.h"

namespace dsv4 {

struct V41Compressor {  // attn.compressor (KV sources only)
  int ratio = 0;
  V41Linear wkv, wgate;     // [head_dim, dim]; wgate only above ratio 1
  std::vector<float> norm;  // [head_dim]
};

struct V41Indexer {  // attn.indexer (index sources only)
  V41Linear wq_b;          // [index_heads * index_head_dim, q_lora_rank]
  V41Linear weights_proj;  // [index_heads, dim]
  // KV sources turn their compressed latents into the index keys.
  bool owns_keys = false;
  V41Linear wk;              // [index_head_dim, head_dim]
  std::vector<float> k_norm; // [index_head_dim]
};

struct V41Attention {  // attn
  int ratio = 0;                 // 0: window only; else the compressed stream it reads
  std::vector<float> attn_sink;  // [heads]
  V41Linear wq_a, wq_b, wkv, wo_b;
  std::vector<float> q_norm, kv_norm;
  V41Linear wo_a;  // [groups * o_lora_rank, heads * head_dim / groups], dequantized as the reference does
  std::optional<V41Compressor> compressor;
  std::optional<V41Indexer> indexer;
};

struct V41Expert {
  V41Linear w1, w2, w3;
};

struct V41MoE {  // ffn
  V41Linear gate;                // [experts, dim]
  std::vector<float> gate_bias;  // [experts]
  std::vector<V41Expert> experts;
  V41Expert shared;
};

// engram: an FP8 table read by row, its projection to hc keys and a value,
// and the gate's per-copy weights. The table stays in the checkpoint file's
// read-only mapping (V41Weights::files): a token reads a few rows, the page
// cache holds them once for every rank and process reading the file, and
// loading reads none of it.
struct V41Engram {
  int64_t rows = 0, head_dim = 0;
  const uint8_t* codes = nullptr;   // [rows, head_dim] e4m3
  const uint8_t* scales = nullptr;  // [rows, head_dim / 32] e8m0
  V41Linear wkv;                // [dim * (hc + 1), hash_columns * head_dim]
  std::vector<float> qk;        // q_weight * k_weight [hc, dim]
  void row(int64_t r, float* out) const;
};

struct V41Block {
  V41Attention attn;
  V41MoE ffn;
  std::vector<float> attn_norm, ffn_norm;
  HyperConnWeights hc_attn, hc_ffn;  // as V4's
  std::optional<V41Engram> engram;
};

// The DSpark drafter, stored as `mtp.N.`: its stages are window-only blocks
// with their own experts; the first projects the target's taps, the last
// carries the norm, the Markov head and the confidence head.
struct V41DSpark {
  V41Linear main_proj;             // mtp.0.main_proj [dim, taps * dim]
  std::vector<float> main_norm;    // mtp.0.main_norm [dim]
  std::vector<V41Block> stages;    // mtp.N
  std::vector<float> norm;         // mtp.<last>.norm [dim]
  V41Linear markov_embed;          // mtp.<last>.markov_head.embed [vocab, rank], read by row
  V41Linear markov_head;           // mtp.<last>.markov_head.head [vocab, rank]
  V41Linear confidence;            // mtp.<last>.confidence_head.proj [1, dim + rank]
};

class Checkpoint;

struct V41Weights {
  V41Linear embed;           // [vocab, dim], read by row
  std::vector<V41Block> blocks;
  std::vector<float> norm;   // [dim]
  V41Linear head;            // [vocab, dim]
  std::optional<V41DSpark> dspark;
  std::shared_ptr<const Checkpoint> files;  // the mapping the Engram tables are read from

  // Every linear a forward or draft multiplies by (not embed and
  // markov_embed, which are read by row), in no particular order.
  void for_each_product(const std::function<void(V41Linear&)>& f);
  void for_each_product(const std::function<void(const V41Linear&)>& f) const;
  // Every buffer the weights hold (products, tables read by row, norms,
  // sinks and the mHC mixing weights), e.g. to bind them to a NUMA node;
  // not the Engram tables, which stay in the files' shared mapping.
  void for_each_buffer(const std::function<void(const void*, size_t)>& fn) const;
  // Resident bytes as loaded, the Engram tables apart (engram_bytes: the
  // bytes of the tables in the files).
  int64_t resident_bytes() const;
  int64_t engram_bytes() const;
};

}  // namespace dsv4
