// What the runtime (rank workers, the engine, verify) needs of a model,
// whichever family it is (DeepSeek-V4 or V4.1): forwards over a batch of
// chunks whose caches it does not own, and the drafters. A family without a
// drafter answers its calls with an error naming what it lacks.
#pragma once

#include <vector>

#include "base/status.h"
#include "model/config.h"
#include "model/dspark.h"
#include "model/forward_batch.h"

namespace dsv4 {

class ServingModel {
 public:
  virtual ~ServingModel() = default;
  virtual const ModelConfig& config() const = 0;

  // Runs every chunk's tokens and advances the chunks' caches. logits: at
  // each chunk's logit rows; hidden: every row's streams entering the head
  // when want_hidden (the MTP block's input); taps when batch.want_taps.
  virtual Status forward(const ForwardBatch& batch, ForwardOutput* out, bool want_hidden) const = 0;
  // MTP block `mtp_index` over rows continuing `hidden` (DeepseekV4).
  virtual Status forward_mtp(int mtp_index, const ForwardBatch& batch, const float* hidden, ForwardOutput* out,
                             bool want_hidden) const = 0;
  // The DSpark drafter (model/dspark.h): tap rows into the rings, and draft
  // calls, batched.
  virtual Status dspark_fill(SequenceCache* cache, const float* taps, int64_t rows, int64_t pos0, bool every_row,
                             std::vector<float>* main_x) const = 0;
  virtual Status dspark_draft(const std::vector<DSparkCall>& calls, std::vector<DSparkDraft>* out,
                              bool details) const = 0;
};

}  // namespace dsv4
