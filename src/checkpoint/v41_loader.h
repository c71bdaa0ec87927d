// DeepSeek-V4.1 weights from a checkpoint directory in the release's tensor
// names and formats: FP8 e4m3 linears with an e8m0 scale per 32 x 32 tile,
// FP4 e2m1 routed experts (two per byte) with an e8m0 scale per row and 32
// inputs, FP8 Engram tables with a scale per row and 32 columns, the rest
// BF16 or F32. Every shape is checked against the config.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "model/collectives.h"
#include "model/config.h"
#include "model/deepseek_v41.h"
#include "model/v41_weights.h"
#include "model/weights.h"

namespace dsv4 {

// What one rank holds: experts, the block of each MoE's routed experts (the
// main layers' and the DSpark stages' alike; the others stay empty);
// tensor, its share of the attention and the dense linears (V41Weights).
struct RankShards {
  ExpertShard experts;
  TensorShard tensor;
};

// progress: bytes read of all but the Engram tables (which stay mapped),
// those of tensors another rank holds counted as done.
// Fast numerics: every linear packed for the fast kernels as it is read.
StatusOr<std::unique_ptr<V41Weights>> load_v41_weights(const std::string& dir, const ModelConfig& config,
                                                       const LoadProgress& progress = {}, RankShards shards = {},
                                                       kernels::Numerics numerics = kernels::Numerics::kExact);

// The model from a checkpoint directory: its config.json (either form), its
// tokenizer.json (Engram's token map comes from it, checked against the
// config's engram_compressed_vocab_size) and its weights.
StatusOr<std::unique_ptr<DeepseekV41>> load_deepseek_v41(const std::string& dir, const LoadProgress& progress = {},
                                                         RankShards shards = {},
                                                         kernels::Numerics numerics = kernels::Numerics::kExact);

}  // namespace dsv4
