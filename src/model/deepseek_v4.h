// The DeepSeek-V4 forward: embedding, hyper-connected blocks (attention and
// MoE), the hc head and the MTP blocks, over packed chunks of any number of
// sequences at any positions.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "base/scratch.h"
#include "base/status.h"
#include "kernels/dispatch.h"
#include "model/config.h"
#include "model/contiguous_cache.h"
#include "model/dspark.h"
#include "model/hyper_connection.h"
#include "model/serving_model.h"
#include "model/forward_batch.h"
#include "model/forward_scope.h"
#include "model/reference_rows.h"
#include "model/rope.h"
#include "model/weights.h"

namespace dsv4 {

struct ModelOptions {
  // exact: every tensor as the reference computes it, bit for bit (verify);
  // fast: FMA and any summation order, within the bounds of a correct
  // implementation (kernels/dispatch.h), what serving runs.
  kernels::Numerics numerics = kernels::Numerics::kExact;
  LoadProgress on_progress;  // optional, while weights load
  ExpertShard experts;       // the routed experts this rank holds (expert parallelism)
  TensorShard heads;         // the tensor-parallel weights this rank holds
  FlashCommOptions flashcomm;
};

class DeepseekV4 : public ServingModel {
 public:
  // checkpoint/model_loader.h reads one from a checkpoint directory.
  DeepseekV4(ModelConfig config, std::unique_ptr<ModelWeights> weights, const ModelOptions& options = {});

  const ModelConfig& config() const override { return config_; }
  kernels::Numerics numerics() const { return options_.numerics; }
  // The numerics of the forwards from now on (the weights serve either).
  void set_numerics(kernels::Numerics n) { options_.numerics = n; }
  // The expert-parallel group (each rank holding options.experts); the
  // forwards of its ranks must run in lockstep. Null: this rank holds all.
  void set_expert_group(Collectives* group) { expert_group_ = group; }
  // The tensor-parallel group (each rank holding options.heads).
  void set_tensor_group(Collectives* group) { tensor_group_ = group; }
  const ModelWeights& weights() const { return *weights_; }
  // How many forwards so far held the residual stream split (FlashComm1).
  int64_t flashcomm_forwards() const { return flashcomm_forwards_.load(); }

  // Contiguous caches for one sequence: the main layers, or MTP block k.
  ContiguousCache new_sequence() const;
  ContiguousCache new_mtp_sequence(int mtp_index) const;

  // Runs every chunk's tokens through the main model and advances the
  // chunks' states. logits: at each chunk's logit rows; hidden: every row's
  // streams entering the head when want_hidden.
  Status forward(const ForwardBatch& batch, ForwardOutput* out, bool want_hidden = false) const override;

  // MTP block `mtp_index`: batch holds the MTP input ids (the token after
  // each row's) with MTP states, hidden the streams [rows, hc, dim] the
  // rows continue: the main model's, or this block's own from the previous
  // draft step. hidden out: the block's output streams, when want_hidden.
  Status forward_mtp(int mtp_index, const ForwardBatch& batch, const float* hidden, ForwardOutput* out,
                     bool want_hidden = false) const override;

  // The DSpark drafter (model/dspark.h, dspark.cc); config().has_dspark().
  // main_x of `rows` tap rows [rows, taps * dim] at positions pos0.. into
  // each stage's ring in `cache`: the last window of them, or every row
  // (every_row: a prefix cache keeps the rows of whole blocks); main_x
  // [rows, dim] out when asked.
  Status dspark_fill(SequenceCache* cache, const float* taps, int64_t rows, int64_t pos0, bool every_row = false,
                     std::vector<float>* main_x = nullptr) const override;
  // Draft calls, batched. details: also main_x, hidden, base logits and
  // every stage's output streams.
  Status dspark_draft(const std::vector<DSparkCall>& calls, std::vector<DSparkDraft>* out,
                      bool details = false) const override;

 private:
  Status check_batch(const ForwardBatch& batch) const;
  void embed(const ForwardBatch& batch, float* out) const;
  // attend: the attention to run instead of attention_forward (DSpark stages).
  using AttendFn = std::function<void(const float* x, int64_t rows, float* out)>;
  // The next block's first hc_pre, taken by this block's last hc_post (at
  // decode one pool job for both, as within a block): the next block (its
  // attention's mixes and norm; set by the caller) and, once this block has
  // run, the mixes and the normed sublayer input they give.
  struct NextBlock {
    const BlockWeights* next = nullptr;
    bool ready = false;
    HcMix mix;
    ScratchVector<float> x;
  };
  void block(const kernels::Kernels& k, const BlockWeights& b, int cache_layer, const ForwardBatch& batch,
             const ReferenceRows& rr, float* h, const AttendFn* attend = nullptr, NextBlock* link = nullptr) const;
  // x [n, dim] (normed) -> logits [n, vocab], gathered over a vocabulary split.
  void full_logits(const kernels::Kernels& k, const float* x, int64_t n, float* logits) const;
  void head(const kernels::Kernels& k, const HcHeadWeights& hc, const std::vector<float>& norm,
            const ForwardBatch& batch, const ReferenceRows& rr, const float* held, ForwardOutput* out) const;
  std::vector<float> select_rows(const std::vector<int64_t>& batch_rows, const float* held) const;
  ForwardScope scope_for(const ForwardBatch& batch) const;
  void all_streams(const float* held, float* all, int64_t rows) const;
  const Rope& rope_for(int ratio) const { return ratio ? compress_rope_ : window_rope_; }

  ModelConfig config_;
  ModelOptions options_;
  std::unique_ptr<ModelWeights> weights_;
  Collectives* expert_group_ = nullptr;
  Collectives* tensor_group_ = nullptr;
  mutable std::atomic<int64_t> flashcomm_forwards_{0};
  Rope window_rope_;    // plain RoPE for sliding-window layers
  Rope compress_rope_;  // YaRN for compressed layers
};

}  // namespace dsv4
