// A request as the scheduler tracks it: tokens, progress and pages (ids
// only; the scheduler owns no tensors).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/block_table.h"
#include "sched/sampling_params.h"

namespace dsv4 {

enum class RequestStatus { kWaiting, kRunning, kFinished };
enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort"

struct Request {
  int64_t id = 0;
  std::vector<int32_t> prompt;
  SamplingParams params;
  std::vector<int32_t> output;  // generated tokens
  int64_t num_computed = 0;     // tokens whose caches are written
  BlockTable pages;
  int partition = 0;  // the data-parallel group holding its pages
  bool paused = false;  // not scheduled (running: its pages kept) until resumed
  RequestStatus status = RequestStatus::kWaiting;
  FinishReason finish = FinishReason::kNone;
  int num_preemptions = 0;
  // Speculative decoding: the MTP block's draft tokens for the positions
  // after the last token (not part of the output until verified), and how
  // many were proposed and accepted so far.
  std::vector<int32_t> draft;
  int64_t drafts_proposed = 0;
  int64_t drafts_accepted = 0;
  // Prompt tokens whose caches came from the prefix cache at the last
  // admission: their rows are in pages shared with the cache, never written
  // by this request.
  int64_t cached_tokens = 0;
  // Where its first chunk since admission starts (its compressor states
  // start empty there): 0, or a prefix hit's end less the positions its
  // states need recomputed (CacheGeometry::prefix_replay_tokens).
  int64_t resumed_from = 0;
  // Its full blocks the prefix cache has seen (taken or recorded), and the
  // chain key of the last of them.
  int64_t blocks_seen = 0;
  // prompt_logprobs: prompt positions [1, prompt_scored) were reported (a
  // recomputation after preemption reports none twice).
  int64_t prompt_scored = 1;
  uint64_t last_block_key = 0;

  int64_t num_tokens() const { return static_cast<int64_t>(prompt.size() + output.size()); }
  int32_t token(int64_t i) const {
    const int64_t p = static_cast<int64_t>(prompt.size());
    return i < p ? prompt[i] : output[i - p];
  }
  std::vector<int32_t> tokens() const {
    std::vector<int32_t> t = prompt;
    t.insert(t.end(), output.begin(), output.end());
    return t;
  }
};

}  // namespace dsv4
