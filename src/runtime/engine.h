// The engine step loop: schedule, have the executor run the scheduled
// chunks on the ranks (with their paged caches), sample, commit.
// add_request / step / abort are the API the HTTP server and `dsv4 run` sit
// on. Not thread-safe: one thread drives an engine.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"
#include "kv/kv_cache_manager.h"
#include "model/deepseek_v4.h"
#include "runtime/sampler.h"
#include "runtime/step_executor.h"
#include "runtime/token_constraint.h"
#include "sched/scheduler.h"

namespace dsv4 {

struct EngineOptions {
  SchedulerOptions scheduler;
  KvCacheOptions cache;
};

struct RequestOutput {
  int64_t id = 0;
  std::vector<int32_t> new_tokens;           // produced this step
  std::vector<SampledToken> new_logprobs;    // with the tokens, when the request asked for logprobs
  // prompt_logprobs: the scores of prompt positions [prompt_from,
  // prompt_from + size) computed this step (position 0 has none).
  int64_t prompt_from = 0;
  std::vector<SampledToken> prompt_logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;                         // why the engine had to give up on it
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;     // prompt tokens served from the prefix cache
  int64_t drafts_proposed = 0;   // speculative decoding, over the request so far
  int64_t drafts_accepted = 0;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;     // computed prompt tokens (recomputation included)
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  std::vector<int64_t> requests_per_group;  // admitted to each data-parallel group
  // Speculative decoding: draft tokens verified and accepted, and the
  // chunks that verified drafts (mean accepted length = accepted / chunks + 1).
  int64_t drafts_proposed = 0;
  int64_t drafts_accepted = 0;
  int64_t verify_chunks = 0;
  // Per draft position k (0-based): drafts proposed there, and accepted
  // (with all before it: accepted_at[k] / proposed_at[k] is how often a
  // run gets past draft k).
  std::array<int64_t, kMaxDraftTokens> proposed_at{};
  std::array<int64_t, kMaxDraftTokens> accepted_at{};
  // Prefix caching: prompt tokens of admitted requests, and those whose
  // caches came from the prefix cache.
  int64_t prefix_queried_tokens = 0;
  int64_t prefix_hit_tokens = 0;
};

class Engine {
 public:
  // One rank over `model` (not owned).
  static StatusOr<std::unique_ptr<Engine>> create(const ServingModel* model, const EngineOptions& options);
  // Over the executor's ranks, one cache partition per data-parallel group.
  static StatusOr<std::unique_ptr<Engine>> create(std::unique_ptr<StepExecutor> executor,
                                                  const SchedulerOptions& options);
  // The cache options the scheduler options imply (state pages and rings
  // for max_num_seqs requests).
  static StatusOr<KvCacheOptions> cache_options(const ModelConfig& config, EngineOptions options);

  // Whether add_request would take it: the parameters and the prompt (token
  // ids, length). Reads only options, so any thread may ask.
  Status check_request(const std::vector<int32_t>& prompt, const SamplingParams& params) const;
  // check_request, then queues it.
  StatusOr<int64_t> add_request(std::vector<int32_t> prompt, const SamplingParams& params);
  // One scheduler step; outputs of the requests that produced tokens or ended.
  std::vector<RequestOutput> step();
  // Ends a request now (abort, or a stop string found above the engine).
  bool finish(int64_t id, FinishReason reason = FinishReason::kAbort);
  // Frees a running request's pages now; it is recomputed when re-admitted
  // and continues exactly where it was (also what happens under page
  // pressure).
  bool preempt(int64_t id);
  // Holds a request (running: with its pages; it takes no step) until resumed
  // (Scheduler::pause).
  bool pause(int64_t id) { return scheduler_->pause(id); }
  bool resume(int64_t id) { return scheduler_->resume(id); }
  bool has_unfinished() const { return scheduler_->has_unfinished(); }
  // The ranks answer (a step stuck past its timeout means one is gone).
  bool healthy() const { return executor_->healthy(); }
  Status heartbeat() { return executor_->heartbeat(); }

  // Sees the logits of every sampled position (for checks against verify).
  using LogitsObserver = std::function<void(int64_t id, int64_t position, const float* logits)>;
  void set_logits_observer(LogitsObserver observer) { observer_ = std::move(observer); }
  // Sees every request's drafts as they are made, with the position they
  // follow (the last committed one).
  using DraftObserver = std::function<void(int64_t id, int64_t position, const std::vector<int32_t>& drafts)>;
  void set_draft_observer(DraftObserver observer) { draft_observer_ = std::move(observer); }

  // The cache and what it holds in tokens and requests, for start-up logs.
  std::string capacity_summary() const;
  // A data-parallel group's cache (the only one without data parallelism).
  KvCacheManager& cache(int group = 0) { return *executor_->cache(group); }
  const KvCacheManager& cache(int group = 0) const { return *executor_->cache(group); }
  int num_groups() const { return executor_->num_groups(); }
  const Scheduler& scheduler() const { return *scheduler_; }
  const EngineStats& stats() const { return stats_; }
  // The requests the last step ran (decodes and prefill chunks).
  const std::vector<int64_t>& last_step_requests() const { return last_step_; }
  const ModelConfig& config() const { return executor_->config(); }
  StepExecutor& executor() { return *executor_; }

 private:
  Engine(std::unique_ptr<StepExecutor> executor, const SchedulerOptions& options);
  StepPlan plan_step(const SchedulerOutput& schedule) const;
  // Aborts a partition's first waiting request when nothing runs there and
  // it does not fit even the empty cache.
  void abort_unfittable(std::vector<RequestOutput>* outputs);
  // Appends a sampled token and decides whether the request is done.
  FinishReason take_token(Request* r, const SampledToken& t) const;
  // Chooses a sampling chunk's tokens from its logit rows (verifying its
  // drafts) into o; returns how many drafts were kept.
  // A constrained request's rows are masked in place.
  int64_t sample_chunk(const ScheduledChunk& c, SampledLogits* rows, RequestOutput* o);
  // prompt_logprobs: scores the prompt tokens a chunk's logit rows predict.
  void score_prompt(const ScheduledChunk& c, const SampledLogits* rows, RequestOutput* o);
  // Runs the drafter (the MTP block, or DSpark) over the rows the step
  // committed (finished requests' too: their pages are freed after) and
  // drafts the next step's tokens of the decoding requests.
  void draft(const SchedulerOutput& schedule, const std::vector<int64_t>& committed,
             const std::vector<uint8_t>& finished);
  bool speculative() const { return scheduler_->options().num_speculative_tokens > 0; }
  bool dspark() const {
    return speculative() && scheduler_->options().drafter == SchedulerOptions::Drafter::kDSpark;
  }

  std::unique_ptr<StepExecutor> executor_;
  std::unique_ptr<Scheduler> scheduler_;
  std::map<int64_t, std::mt19937_64> rngs_;
  // DSpark drafts a sampling request's chain at its temperature: per
  // request, the logits its pending drafts were drawn from [drafts, vocab].
  std::map<int64_t, std::vector<float>> draft_logits_;
  // Constrained requests' grammars, by request id.
  std::map<int64_t, TokenConstraint> constraints_;
  LogitsObserver observer_;
  DraftObserver draft_observer_;
  EngineStats stats_;
  std::vector<int64_t> last_step_;
  int64_t next_id_ = 1;
};

}  // namespace dsv4
