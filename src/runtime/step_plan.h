// What one engine step asks of the ranks, as plain values: the scheduled
// chunks (tokens, positions, page ids) of every data-parallel group, and
// what each group gives back for sampling. Plain values so a plan can
// cross processes (MPI) as bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "kv/block_table.h"

namespace dsv4 {

struct PlannedChunk {
  int group = 0;            // the data-parallel group running it
  int64_t start = 0;        // first position
  int64_t prefill_len = 0;  // the request's prompt length
  bool samples = false;     // its last position's logits choose a token
  std::vector<int32_t> tokens;
  BlockTable pages;         // the request's pages (ids into its group's stores)
};

struct StepPlan {
  std::vector<PlannedChunk> chunks;  // grouped by data-parallel group, in group order
  // Per group: every sampling chunk only needs the argmax of its logits,
  // so the ranks exchange their vocabulary slices' best instead of logits.
  std::vector<uint8_t> argmax_only;
  bool stop = false;  // the engine is shutting down: ranks leave their loops
};

// One sampling chunk's outcome: the argmax token, or the whole logits row.
struct SampledLogits {
  int32_t argmax = -1;
  std::vector<float> logits;  // [vocab] unless argmax >= 0
};

// Per sampling chunk of one group, in plan order.
using GroupResult = std::vector<SampledLogits>;

std::vector<char> serialize(const StepPlan& plan);
StatusOr<StepPlan> deserialize_plan(const std::vector<char>& bytes);
std::vector<char> serialize(const GroupResult& result);
StatusOr<GroupResult> deserialize_result(const char* data, size_t size);

}  // namespace dsv4
