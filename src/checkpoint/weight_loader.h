// Loads a rank's share of a checkpoint into the model's weights: every
// tensor the config implies is checked (errors name the tensor and its
// file), then only this rank's rows and experts are read, in bounded pieces
// on every core, straight into the forward's packed panels. Peak memory is
// the resident weights plus a few scratch buffers per thread; no file page
// stays mapped.
#pragma once

#include <memory>

#include "base/status.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/load_tasks.h"
#include "model/collectives.h"
#include "model/config.h"
#include "model/weights.h"

namespace dsv4 {

struct WeightLoadOptions {
  LoadProgress progress;  // optional
  // Routed experts outside `experts` are not loaded (left empty); with
  // `heads`, only that rank's attention heads, output groups, indexer heads,
  // shared-expert features and vocabulary are kept.
  ExpertShard experts;
  TensorShard heads;
};

StatusOr<std::unique_ptr<ModelWeights>> load_weights(const ModelConfig& config, const Checkpoint& ckpt,
                                                     const WeightLoadOptions& options = {});

}  // namespace dsv4
