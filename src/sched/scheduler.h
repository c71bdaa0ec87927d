// Continuous batching over a paged cache: each step takes the running
// requests' next tokens (decodes, unfinished prefills) and then admits
// waiting requests, chunking long prompts and packing several requests into
// one forward, within max_num_batched_tokens and max_num_seqs. When pages
// run out, the most recently admitted request is preempted: its pages are
// freed and it recomputes its tokens (prompt and output so far) later.
// With data-parallel attention the cache is partitioned, one partition per
// DP group: a request is assigned to the least loaded partition when it
// arrives and stays there (its pages live in that group's ranks); each
// partition is scheduled with its own budget, as each DP group runs its own
// batch. The scheduler owns the requests but no tensors.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "base/status.h"
#include "kv/kv_cache_manager.h"
#include "sched/request.h"

namespace dsv4 {

struct SchedulerOptions {
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;  // 0: the model's max_position_embeddings
  // Most tokens one request's prefill takes in a step; 0: no limit but the
  // step's budget.
  int64_t long_prefill_token_threshold = 0;
  // Speculative decoding: draft tokens per step (0: off, at most
  // kMaxDraftTokens), drafted by the MTP block or the DSpark drafter.
  int num_speculative_tokens = 0;
  enum class Drafter { kMtp, kDSpark } drafter = Drafter::kMtp;
  // DSpark: verify a step's drafts up to the first whose confidence
  // sigmoid(c_k) is below this (DeepSpec's --confidence-threshold); 0
  // verifies all of them (DeepSpec's default).
  float confidence_threshold = 0.0f;
};

struct ScheduledChunk {
  Request* request = nullptr;
  int partition = 0;       // the request's data-parallel group
  int64_t start = 0;       // first position
  int64_t num_tokens = 0;  // rows: the request's tokens [start, start + num_tokens - draft_rows), then drafts
  int64_t draft_rows = 0;  // the request's first draft tokens, verified by this chunk
  bool samples = false;    // reaches the last known token: its logits give the next one(s)
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<int64_t> preempted;  // request ids preempted during this schedule
  int64_t num_tokens() const {
    int64_t n = 0;
    for (const auto& c : chunks) n += c.num_tokens;
    return n;
  }
};

class Scheduler {
 public:
  // One cache per partition (data-parallel group).
  Scheduler(const SchedulerOptions& options, const std::vector<KvCacheManager*>& partitions);
  Scheduler(const SchedulerOptions& options, KvCacheManager* kv)
      : Scheduler(options, std::vector<KvCacheManager*>{kv}) {}

  // Whether a request of this prompt and max_tokens fits max_model_len.
  Status check(const std::vector<int32_t>& prompt, int64_t max_tokens) const;
  // Queues a request after check().
  Status add(std::unique_ptr<Request> request);
  SchedulerOutput schedule();
  // After the forward has written a chunk's caches: its first `rows` rows
  // count (all but the rejected draft rows). Then, unless the MTP block
  // still has to read them (release_window false), the raw-KV pages behind
  // the request's window are released.
  void commit(const ScheduledChunk& chunk, int64_t rows, bool release_window = true);
  void release_behind_window(Request* r) { parts_[r->partition].kv->release_behind_window(&r->pages, r->num_computed); }
  // Gives a running request pages up to position new_len (the draft rows
  // of its next step); false when the cache has none to spare.
  bool reserve(Request* r, int64_t new_len) { return parts_[r->partition].kv->allocate(&r->pages, new_len); }
  // Ends a request (finished or aborted) and frees its pages. Returns false
  // for an unknown or already finished id.
  bool finish(int64_t id, FinishReason reason);
  // Preempts a running request now: its pages are freed and it is
  // recomputed when re-admitted, as under page pressure. False when it is
  // not running.
  bool preempt(int64_t id);

  // Holds a request: running, it keeps its pages but takes no step (nor a
  // place among max_num_seqs), and when pages run short (for a running
  // request or one being admitted) it is preempted first, staying paused;
  // waiting, it is not admitted. Until resumed. False when it is unknown or
  // finished.
  bool pause(int64_t id);
  bool resume(int64_t id);

  Request* find(int64_t id);
  const Request* find(int64_t id) const { return const_cast<Scheduler*>(this)->find(id); }
  bool has_unfinished() const { return !requests_.empty(); }
  int num_partitions() const { return static_cast<int>(parts_.size()); }
  Request* next_waiting(int partition);
  int64_t num_running(int partition) const { return static_cast<int64_t>(parts_[partition].running.size()); }
  int64_t num_waiting(int partition) const { return static_cast<int64_t>(parts_[partition].waiting.size()); }
  int64_t num_running() const;  // over every partition
  int64_t num_waiting() const;
  const SchedulerOptions& options() const { return options_; }
  // Prefix caching: tokens of admitted requests looked up, and found.
  int64_t prefix_queried_tokens() const { return prefix_queried_; }
  int64_t prefix_hit_tokens() const { return prefix_hit_; }

 private:
  struct Partition {
    KvCacheManager* kv = nullptr;
    std::deque<Request*> waiting;
    std::vector<Request*> running;  // in admission order
  };
  // Tokens a request runs this step given what is left of the budget, and
  // how many of them are draft rows.
  int64_t chunk_size(const Request& r, int64_t budget) const;
  static int64_t draft_rows(const Request& r, int64_t n);
  void schedule(int partition, SchedulerOutput* out);
  void preempt(Request* r);
  // A request being admitted takes the pages of the cached blocks its tokens
  // start with (leaving at least one token to compute); undo_prefix gives
  // them back when it cannot be admitted after all.
  void take_prefix(Request* r);
  void undo_prefix(Request* r);
  // Records the request's newly completed blocks in the prefix cache.
  void cache_blocks(Request* r);
  // Cached tokens `r` would find in a partition.
  int64_t prefix_hit(int partition, const Request& r);
  int least_loaded() const;

  SchedulerOptions options_;
  std::vector<Partition> parts_;
  std::map<int64_t, std::unique_ptr<Request>> requests_;  // unfinished ones
  int64_t prefix_queried_ = 0, prefix_hit_ = 0;
};

}  // namespace dsv4
