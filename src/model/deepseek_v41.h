// The DeepSeek-V4.1 forward, as its reference computes it: embedding, hc
// copies, per layer an optional Engram lookup then a block whose attention
// collapses the copies with the mix the previous sublayer computed (the
// first with copy 0), the MoE with the attention's; the head collapses with
// the last FFN's mix. The model owns no sequence state: the caches hold it
// (V41Chunk).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/collectives.h"
#include "kernels/dispatch.h"
#include "model/config.h"
#include "model/dspark.h"
#include "model/serving_model.h"
#include "model/engram_hash.h"
#include "model/forward_scope.h"
#include "model/reference_rows.h"
#include "model/rope.h"
#include "model/v41_attention.h"
#include "model/contiguous_cache.h"
#include "model/v41_weights.h"

namespace dsv4 {

class DeepseekV41 : public ServingModel {
 public:
  // token_map: each token id's Engram compressed id (tokenizer/engram_token_map.h).
  DeepseekV41(ModelConfig config, std::unique_ptr<V41Weights> weights, std::vector<int32_t> token_map,
              int32_t compressed_vocab);

  const ModelConfig& config() const override { return config_; }
  const V41Weights& weights() const { return *weights_; }
  // Expert parallelism: this rank holds its ExpertShard of the routed
  // experts (the loader's) and every forward and draft of the group's ranks
  // runs in lockstep, an empty one too. Null: this rank holds all.
  void set_expert_group(Collectives* group) { expert_group_ = group; }
  // Tensor parallelism: this rank holds its share of the attention heads
  // and of the dense linears' output features (the loader's TensorShard);
  // the group's ranks run every forward together on the same rows, each
  // routing its block of them, and all get the same whole outputs. With
  // FlashComm1, a prefill forward of at least flashcomm.min_tokens rows
  // keeps each rank's block of the residual stream only (sequence
  // parallelism): the sublayers' inputs are gathered, their outputs
  // scattered by rows.
  void set_tensor_group(Collectives* group, FlashCommOptions flashcomm = {}) {
    tensor_group_ = group;
    flashcomm_ = flashcomm;
  }
  int64_t flashcomm_forwards() const { return flashcomm_forwards_.load(); }
  // Fast numerics from now on, for good: every linear a forward multiplies
  // by is packed for the fast kernels and its stored copy released (exact
  // numerics takes a new load). wo_a joins when its groups fill whole
  // panels; a linear whose scales the kernels cannot take stays exact. The
  // attention and indexer keep their exact kernels.
  void use_fast_numerics();
  kernels::Numerics numerics() const { return numerics_; }
  // A sequence's caches in plain vectors (tests, verify).
  std::unique_ptr<ContiguousCache> new_cache() const;
  // Engram look-back: how many tokens before a chunk SeqChunk::history holds.
  int history_tokens() const { return config_.engram.enabled() ? config_.engram.max_ngram_size - 1 : 0; }

  // Each chunk's history holds Engram's look-back: the last
  // min(start_pos, history_tokens()) tokens before it. The taps are the
  // DSpark drafter's (inputs of its target layers, averaged over the
  // copies); no hidden streams (no MTP block).
  Status forward(const ForwardBatch& batch, ForwardOutput* out, bool want_hidden = false) const override;
  Status forward_mtp(int mtp_index, const ForwardBatch& batch, const float* hidden, ForwardOutput* out,
                     bool want_hidden = false) const override;

  // The DSpark drafter (config().has_dspark(); model/v41_dspark.cc). Fill
  // puts the taps [rows, taps * dim] of positions pos0.. into the rings (a
  // prefill's forward_spec does only this): the last window of them, or
  // every row. A draft places its rows where call.reference_index of
  // reference_batch puts them in the reference's [calls, K] tensors.
  Status dspark_fill(SequenceCache* cache, const float* taps, int64_t rows, int64_t pos0, bool every_row = false,
                     std::vector<float>* main_x = nullptr) const override;
  Status dspark_draft(const std::vector<DSparkCall>& calls, std::vector<DSparkDraft>* out,
                      bool details = false) const override;

 private:
  using Attend = std::function<void(const float* x, float* y)>;
  // The batch's chunks, checked (nothing is changed by a refused batch).
  Status check_batch(const ForwardBatch& batch, std::vector<V41Chunk>* chunks) const;
  // Rows the reference runs in one step each: a chunk cut at
  // v41_first_row_after_unwritten_keys runs as two forwards (no trace).
  Status forward_in_two(const ForwardBatch& batch, const std::vector<int64_t>& cut, ForwardOutput* out) const;
  Status forward_rows(const ForwardBatch& batch, ForwardOutput* out) const;
  // Rows in `held` (null: all of them) are the ones h holds.
  void engram(const V41Engram& g, int which, const std::vector<int64_t>& rows_ids, float* h, int64_t rows,
              const TokenSplit* held, const ReferenceRows& rr) const;
  // x [rows, dim] -> y [rows, dim], or this rank's block of them (held).
  void moe(const V41MoE& w, int top_k, const float* x, int64_t rows, const ReferenceRows& rr, const TokenSplit* held,
           float* y) const;
  // A block over h [rows, hc, dim], its attention `attend` (x of every row
  // -> y of h's rows); pre [rows, hc]: the collapse weights the previous
  // sublayer left, replaced by the FFN's. Under FlashComm1 h and pre hold
  // the rows of `held` only.
  void block(const V41Block& b, const Attend& attend, int top_k, const ReferenceRows& rr, const TokenSplit* held,
             std::vector<float>* pre, float* h) const;
  const Rope& rope_for(int ratio) const { return ratio ? compress_rope_ : window_rope_; }
  V41LayerContext layer_context(int layer, int ratio, const TokenSplit* held = nullptr) const {
    return {config_, rope_for(ratio), layer, tensor_group_, held, numerics_};
  }

  ModelConfig config_;
  std::unique_ptr<V41Weights> weights_;
  std::vector<int32_t> token_map_;
  EngramHashLayout engram_layout_;
  Rope window_rope_, compress_rope_;
  Collectives* expert_group_ = nullptr;
  Collectives* tensor_group_ = nullptr;
  FlashCommOptions flashcomm_;
  mutable std::atomic<int64_t> flashcomm_forwards_{0};
  kernels::Numerics numerics_ = kernels::Numerics::kExact;
};

}  // namespace dsv4
