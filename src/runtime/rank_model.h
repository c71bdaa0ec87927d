// One rank's share of a checkpoint, for either model family: its heads
// (DeepSeek-V4's tensor parallelism) and its block of the routed experts,
// joined to the rank's groups. Both executors load their ranks here.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "dist/memory_binding.h"
#include "dist/topology.h"
#include "model/deepseek_v4.h"
#include "model/deepseek_v41.h"

namespace dsv4 {

struct RankModel {
  std::unique_ptr<ServingModel> model;
  const DeepseekV4* v4 = nullptr;    // model, when it is DeepSeek-V4
  const DeepseekV41* v41 = nullptr;  // model, when it is DeepSeek-V4.1
  int64_t resident_bytes() const { return v41 ? v41->weights().resident_bytes() : v4->weights().resident_bytes(); }
};

// options: numerics and progress (DeepSeek-V4.1 takes no other);
// the shards and FlashComm1 come from t, rank and flashcomm. groups must
// outlive the model.
StatusOr<RankModel> load_rank_model(const std::string& dir, const ModelConfig& config, ModelOptions options,
                                    const FlashCommOptions& flashcomm, const Topology& t, int rank,
                                    const RankGroups& groups);

// Binds the weights `m` holds in memory to NUMA node `node` (V4.1's Engram
// tables stay in the checkpoint's mapping, shared by the ranks).
Status bind_rank_weights(const RankModel& m, MemoryBinding& binding, int node);

}  // namespace dsv4
