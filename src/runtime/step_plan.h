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
  bool samples = false;     // its last rows' logits choose tokens
  // Logits for every row (scoring the prompt: prompt_logprobs), not only the
  // sampling rows, which are then its last ones.
  bool all_logits = false;
  // Trailing rows that are draft tokens to verify: a sampling chunk gets
  // logits for them and for the row before (1 + draft_rows rows).
  int32_t draft_rows = 0;
  // The request's first chunk since admission: its compressor states start
  // empty.
  bool reset_states = false;
  // Positions below this have their rows in pages shared with the prefix
  // cache: recomputed (to rebuild the states) but not written.
  int64_t cached_until = 0;
  // Draft plans: the chunk of the forward plan whose first tokens.size()
  // rows the MTP block continues (tokens: each row's next token), and how
  // many tokens to draft after them.
  int32_t source = -1;
  int32_t drafts = 0;
  // DSpark: the drafter samples its chain at this temperature (0: greedy)
  // from a stream seeded with draft_seed.
  float draft_temperature = 0.0f;
  uint64_t draft_seed = 0;
  std::vector<int32_t> tokens;
  // DeepSeek-V4.1's Engram look-back: the request's last min(start,
  // max_ngram_size - 1) tokens before start (empty for V4).
  std::vector<int32_t> history;
  BlockTable pages;         // the request's pages (ids into its group's stores)

  int64_t logit_rows() const {
    return all_logits ? static_cast<int64_t>(tokens.size()) : samples ? 1 + draft_rows : 0;
  }
};

struct StepPlan {
  std::vector<PlannedChunk> chunks;  // grouped by data-parallel group, in group order
  // Per group: every sampling chunk only needs the argmax of its logits,
  // so the ranks exchange their vocabulary slices' best instead of logits.
  std::vector<uint8_t> argmax_only;
  // A draft plan: the MTP block runs over rows of the step's forward (which
  // each rank keeps until then) and drafts tokens; no main-model forward.
  bool draft = false;
  // The ranks keep this forward's hidden streams for the draft plan that
  // follows it (speculative decoding).
  bool keep_hidden = false;
  // DSpark: the forward keeps every row's taps for the draft plan that
  // follows, and a draft plan runs the DSpark drafter (its rows fill each
  // request's rings; the last one drafts) instead of the MTP block.
  bool keep_taps = false;
  bool dspark = false;
  // Raw KV of every position goes to the pages (a prefix cache keeps
  // blocks), not only each chunk's last window.
  bool keep_raw_kv = false;
  bool stop = false;  // the engine is shutting down: ranks leave their loops
};

// One logit row's outcome (the argmax token, or the whole logits row), or
// a draft job's tokens.
struct SampledLogits {
  int32_t argmax = -1;
  std::vector<float> logits;  // [vocab] unless argmax >= 0
  std::vector<int32_t> drafts;
  // DSpark: per draft, the drafter's confidence logit, and when it sampled
  // (draft_temperature > 0) its logits [drafts, vocab], the distribution
  // each draft was drawn from (before the temperature).
  std::vector<float> draft_confidence;
  std::vector<float> draft_logits;
};

// Per logit row (forward plans) or drafting job (draft plans) of one group,
// in plan order.
using GroupResult = std::vector<SampledLogits>;

// Results a chunk gives back: its logit rows (forward plans) or one for a
// drafting job.
inline int64_t results_of(const StepPlan& plan, const PlannedChunk& c) {
  return plan.draft ? (c.drafts > 0 ? 1 : 0) : c.logit_rows();
}

// The groups' results (each from the group's first rank, index = group) in
// plan order.
StatusOr<std::vector<SampledLogits>> merge_group_results(const StepPlan& plan, std::vector<GroupResult> groups);

std::vector<char> serialize(const StepPlan& plan);
StatusOr<StepPlan> deserialize_plan(const std::vector<char>& bytes);
std::vector<char> serialize(const GroupResult& result);
StatusOr<GroupResult> deserialize_result(const char* data, size_t size);

}  // namespace dsv4
