// The model's parameters, grouped the way the paper describes the blocks.
// Names in comments are the checkpoint's tensor names below `layers.N.`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "base/weight_buffer.h"
#include "model/collectives.h"
#include "model/config.h"
#include "ops/linear.h"

namespace dsv4 {

// Whether the reference rounds (FP8) or quantizes (W8A8) the input of the
// linear stored under `prefix` (e.g. "layers.0.attn.wq_a"); a few it applies
// to the input as it is.
bool reference_rounds_input(const std::string& prefix);

// Called as weights load (checkpoint/weight_loader.h): bytes read so far,
// bytes to read.
using LoadProgress = std::function<void(uint64_t loaded, uint64_t total)>;

struct CompressorWeights {  // attn.compressor / attn.indexer.compressor
  int ratio = 0;
  int head_dim = 0;
  bool overlap = false;  // ratio 4: windows overlap their predecessor
  bool rotate = false;   // indexer keys: Hadamard + FP4 instead of FP8
  Linear wkv, wgate;     // [coff*head_dim, dim], f32 in the reference
  std::vector<float> ape;   // [ratio, coff*head_dim]
  std::vector<float> norm;  // [head_dim]
};

struct IndexerWeights {  // attn.indexer
  Linear wq_b;          // [index_heads*index_head_dim, q_lora_rank]
  Linear weights_proj;  // [index_heads, dim]
  CompressorWeights compressor;
};

struct AttentionWeights {  // attn
  int ratio = 0;
  std::vector<float> attn_sink;  // [heads]
  Linear wq_a;                   // [q_lora_rank, dim]
  std::vector<float> q_norm;     // [q_lora_rank]
  Linear wq_b;                   // [heads*head_dim, q_lora_rank]
  Linear wkv;                    // [head_dim, dim]
  std::vector<float> kv_norm;    // [head_dim]
  // One per output group this rank holds: [o_lora_rank, heads*head_dim/groups],
  // used dequantized.
  std::vector<Linear> wo_a;
  Linear wo_b;                   // [dim, groups*o_lora_rank]
  std::optional<CompressorWeights> compressor;
  std::optional<IndexerWeights> indexer;
};

struct ExpertWeights {
  Linear w1, w2, w3;  // gate [inter, dim], down [dim, inter], up [inter, dim]
};

struct MoEWeights {  // ffn
  bool hash = false;
  Linear gate;                   // [experts, dim], f32
  std::vector<float> gate_bias;  // [experts], score routing only
  std::vector<int32_t> tid2eid;  // [vocab, topk], hash routing only
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
};

struct HyperConnWeights {  // hc_{attn,ffn}_{fn,base,scale}
  Linear fn;                 // [(2+hc)*hc, hc*dim], f32
  std::vector<float> base;   // [(2+hc)*hc]
  std::vector<float> scale;  // [3]
};

struct HcHeadWeights {  // hc_head_{fn,base,scale}
  Linear fn;                 // [hc, hc*dim], f32
  std::vector<float> base;   // [hc]
  std::vector<float> scale;  // [1]
};

struct BlockWeights {
  AttentionWeights attn;
  MoEWeights ffn;
  std::vector<float> attn_norm, ffn_norm;  // [dim]
  HyperConnWeights hc_attn, hc_ffn;
};

struct MtpWeights {  // mtp.N
  BlockWeights block;
  Linear e_proj, h_proj;  // [dim, dim]
  std::vector<float> enorm, hnorm, norm;
  HcHeadWeights hc_head;
};

// The DSpark drafter (mtp.0 .. mtp.{n-1} of a DSpark checkpoint): a
// projection of the target's taps, full V4 blocks as stages, and the last
// stage's head pieces.
struct DSparkWeights {
  Linear main_proj;                // mtp.0.main_proj [dim, taps*dim]
  std::vector<float> main_norm;    // mtp.0.main_norm [dim]
  std::vector<BlockWeights> stages;
  std::vector<float> norm;         // mtp.{last}.norm [dim]
  HcHeadWeights hc_head;           // mtp.{last}.hc_head_*
  std::vector<float> markov_w1;    // mtp.{last}.markov_head.markov_w1 [vocab, rank]: the previous token's embedding
  Linear markov_w2;                // mtp.{last}.markov_head.markov_w2 [vocab, rank], f32
  Linear confidence;               // mtp.{last}.confidence_head.proj [1, dim + rank], f32, no bias
};

// The token embedding table, kept as the checkpoint stored it (BF16 stays
// BF16; a row is widened to f32 exactly when looked up).
struct EmbeddingTable {
  int64_t rows = 0, dim = 0;
  WeightBuffer<float> f32;      // [rows, dim], or
  WeightBuffer<uint16_t> bf16;  // [rows, dim]
  void row(int64_t r, float* out) const;
  int64_t resident_bytes() const { return static_cast<int64_t>(4 * f32.size() + 2 * bf16.size()); }
};

// What a linear is for, as far as per-token cost goes: main-model linears
// run for every token, routed experts for the tokens routed to them, the
// head for the rows whose logits are wanted, MTP for drafting.
enum class LinearKind { kMain, kRoutedExpert, kHead, kMtp };  // kMtp: any drafter's

struct ModelWeights {
  EmbeddingTable embed;      // [vocab, dim] (this rank's vocabulary slice)
  std::vector<BlockWeights> blocks;
  std::vector<float> norm;   // [dim]
  Linear head;               // [vocab, dim] (this rank's vocabulary slice)
  HcHeadWeights hc_head;
  std::vector<MtpWeights> mtp;
  std::optional<DSparkWeights> dspark;

  // Moves every linear still held as stored into the forward's packed
  // layout (checkpoint/weight_loader.h loads straight into it).
  void pack();
  void for_each_linear(const std::function<void(const Linear&, LinearKind)>& fn) const;

  // Bytes of f32 weights held: all of them, and the routed experts' part.
  int64_t resident_bytes() const;
  int64_t routed_expert_bytes() const;
  // Every buffer of weights held, [at, at + bytes) (empty ones too).
  void for_each_buffer(const std::function<void(const void*, size_t)>& fn) const;
};

}  // namespace dsv4
