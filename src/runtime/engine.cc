#include "runtime/engine.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/check.h"
#include "base/phase_timer.h"
#include "runtime/local_executor.h"

namespace dsv4 {

StatusOr<KvCacheOptions> Engine::cache_options(const ModelConfig& c, EngineOptions options) {
  SchedulerOptions& sched = options.scheduler;
  if (sched.max_model_len <= 0) sched.max_model_len = c.max_position_embeddings;
  if (sched.max_model_len > c.max_position_embeddings)
    return invalid_argument("max-model-len " + std::to_string(sched.max_model_len) + " exceeds the model's " +
                            std::to_string(c.max_position_embeddings) + " positions");
  if (sched.max_num_seqs <= 0 || sched.max_num_batched_tokens <= 0)
    return invalid_argument("max-num-seqs and max-num-batched-tokens must be positive");
  const int k = sched.num_speculative_tokens;
  if (k < 0 || k > kMaxDraftTokens)
    return invalid_argument("num_speculative_tokens must be between 1 and " + std::to_string(kMaxDraftTokens) +
                            ", got " + std::to_string(k));
  if (sched.drafter == SchedulerOptions::Drafter::kDSpark) {
    if (k > 0 && !c.has_dspark())
      return invalid_argument("speculative decoding with DSpark needs a DSpark checkpoint (dspark_block_size in its config)");
    if (k > c.dspark_block_size)
      return invalid_argument("the DSpark drafter proposes " + std::to_string(c.dspark_block_size) +
                              " tokens per step; num_speculative_tokens " + std::to_string(k) + " is more");
  } else if (k > 0 && c.n_mtp_layers < 1) {
    return invalid_argument("speculative decoding with MTP needs a model with an MTP layer");
  }
  KvCacheOptions cache = options.cache;
  cache.max_num_seqs = sched.max_num_seqs;
  cache.max_num_batched_tokens = sched.max_num_batched_tokens;
  cache.max_draft_tokens = k;
  return cache;
}

StatusOr<std::unique_ptr<Engine>> Engine::create(const ServingModel* model, const EngineOptions& options) {
  DSV4_ASSIGN_OR_RETURN(KvCacheOptions cache, cache_options(model->config(), options));
  DSV4_ASSIGN_OR_RETURN(auto executor, LocalExecutor::single(model, cache));
  return create(std::move(executor), options.scheduler);
}

StatusOr<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<StepExecutor> executor,
                                                 const SchedulerOptions& options) {
  const ModelConfig& c = executor->config();
  SchedulerOptions sched = options;
  if (sched.max_model_len <= 0) sched.max_model_len = c.max_position_embeddings;
  DSV4_RETURN_IF_ERROR(cache_options(c, {sched, {}}).status());  // the same limits checked
  for (int g = 0; g < executor->num_groups(); ++g)
    if (executor->cache(g)->layout().geometry.draft_slack < sched.num_speculative_tokens)
      return invalid_argument("the KV cache was sized for " +
                              std::to_string(executor->cache(g)->layout().geometry.draft_slack) +
                              " draft tokens, the scheduler verifies " + std::to_string(sched.num_speculative_tokens) +
                              " (KvCacheOptions::max_draft_tokens)");
  return std::unique_ptr<Engine>(new Engine(std::move(executor), sched));
}

Engine::Engine(std::unique_ptr<StepExecutor> executor, const SchedulerOptions& options)
    : executor_(std::move(executor)) {
  std::vector<KvCacheManager*> parts;
  for (int g = 0; g < executor_->num_groups(); ++g) parts.push_back(executor_->cache(g));
  scheduler_ = std::make_unique<Scheduler>(options, parts);
}

Status Engine::check_request(const std::vector<int32_t>& prompt, const SamplingParams& params) const {
  const int64_t vocab = config().vocab_size;
  DSV4_RETURN_IF_ERROR(params.validate(vocab));
  for (int32_t t : prompt)
    if (t < 0 || t >= vocab)
      return invalid_argument("prompt token " + std::to_string(t) + " is outside the vocabulary of " +
                              std::to_string(vocab));
  return scheduler_->check(prompt, params.max_tokens);
}

StatusOr<int64_t> Engine::add_request(std::vector<int32_t> prompt, const SamplingParams& params) {
  DSV4_RETURN_IF_ERROR(check_request(prompt, params));
  auto r = std::make_unique<Request>();
  r->id = next_id_;
  r->prompt = std::move(prompt);
  r->params = params;
  DSV4_RETURN_IF_ERROR(scheduler_->add(std::move(r)));
  stats_.requests_per_group.resize(num_groups(), 0);
  ++stats_.requests_per_group[scheduler_->find(next_id_)->partition];
  rngs_[next_id_] = params.seed ? std::mt19937_64(*params.seed) : std::mt19937_64(std::random_device{}());
  if (params.grammar) constraints_.try_emplace(next_id_, params.grammar, params.grammar_after);
  return next_id_++;
}

bool Engine::finish(int64_t id, FinishReason reason) {
  rngs_.erase(id);
  draft_logits_.erase(id);
  constraints_.erase(id);
  return scheduler_->finish(id, reason);
}

std::string Engine::capacity_summary() const {
  const KvCacheManager& kv = cache(0);
  std::string s = kv.summary();
  const int64_t len = scheduler_->options().max_model_len;
  if (kv.token_capacity() >= 0) {
    const int64_t full = std::min<int64_t>(kv.token_capacity() / len, scheduler_->options().max_num_seqs);
    s += "\n  " + std::to_string(full) + " requests of max-model-len " + std::to_string(len) + " fit at once";
  }
  if (num_groups() > 1)
    s += "\n  in each of " + std::to_string(num_groups()) + " data-parallel groups (" + executor_->describe() + ")";
  return s;
}

bool Engine::preempt(int64_t id) {
  if (!scheduler_->preempt(id)) return false;
  ++stats_.preemptions;
  return true;
}

FinishReason Engine::take_token(Request* r, const SampledToken& t) const {
  r->output.push_back(t.token);
  const SamplingParams& p = r->params;
  const int eos = config().eos_token_id;
  if (!p.ignore_eos && t.token == eos) return FinishReason::kStop;
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t.token) != p.stop_token_ids.end())
    return FinishReason::kStop;
  if (static_cast<int64_t>(r->output.size()) >= p.max_tokens) return FinishReason::kLength;
  return FinishReason::kNone;
}

void Engine::abort_unfittable(std::vector<RequestOutput>* outputs) {
  for (int g = 0; g < scheduler_->num_partitions(); ++g) {
    if (scheduler_->num_running(g) > 0) continue;
    Request* r = scheduler_->next_waiting(g);
    if (!r) continue;
    RequestOutput o;
    o.id = r->id;
    o.finished = true;
    o.finish_reason = FinishReason::kAbort;
    o.error = "the request needs more KV cache pages than the whole cache has";
    o.prompt_tokens = static_cast<int64_t>(r->prompt.size());
    finish(r->id, FinishReason::kAbort);
    outputs->push_back(std::move(o));
  }
}

StepPlan Engine::plan_step(const SchedulerOutput& schedule) const {
  StepPlan plan;
  plan.argmax_only.assign(num_groups(), observer_ ? 0 : 1);
  plan.keep_hidden = speculative() && !dspark();
  plan.keep_taps = dspark();
  plan.keep_raw_kv = executor_->cache(0)->keeps_all_raw_kv();
  for (const ScheduledChunk& c : schedule.chunks) {
    const Request* r = c.request;
    PlannedChunk p;
    p.group = c.partition;
    p.start = c.start;
    // Prompt positions keep the prompt's one-shot layout, also when
    // recomputed after a preemption (see ReferenceRows).
    p.prefill_len = static_cast<int64_t>(r->prompt.size());
    p.samples = c.samples;
    // Scoring the prompt: every row of a chunk with prompt positions.
    p.all_logits = r->params.prompt_logprobs && c.start < static_cast<int64_t>(r->prompt.size()) - 1;
    p.draft_rows = static_cast<int32_t>(c.draft_rows);
    p.reset_states = c.start == r->resumed_from;
    p.cached_until = r->cached_tokens;
    const int64_t known = c.num_tokens - c.draft_rows;
    p.tokens.resize(c.num_tokens);
    for (int64_t i = 0; i < known; ++i) p.tokens[i] = r->token(c.start + i);
    for (int64_t i = 0; i < c.draft_rows; ++i) p.tokens[known + i] = r->draft[i];
    const EngramConfig& engram = config().engram;
    if (engram.enabled())
      for (int64_t t = std::max<int64_t>(0, c.start - (engram.max_ngram_size - 1)); t < c.start; ++t)
        p.history.push_back(r->token(t));
    p.pages = r->pages;
    if ((c.samples && !r->params.argmax_only()) || p.all_logits) plan.argmax_only[c.partition] = 0;
    plan.chunks.push_back(std::move(p));
  }
  return plan;
}

int64_t Engine::sample_chunk(const ScheduledChunk& c, SampledLogits* rows, RequestOutput* o) {
  PhaseTimer::Scope time(Phase::kSampling);
  Request* r = c.request;
  const int64_t vocab = config().vocab_size;
  auto found = constraints_.find(r->id);
  TokenConstraint* constraint = found == constraints_.end() ? nullptr : &found->second;
  std::vector<float> raw;  // a constrained row's own logits, for its logprobs
  auto emit = [&](SampledToken t) {
    if (constraint) {
      if (r->params.logprobs && !raw.empty()) t = score_token(raw.data(), vocab, t.token, *r->params.logprobs);
      PhaseTimer::Scope advancing(Phase::kGrammar);
      constraint->take(t.token);
    }
    o->new_tokens.push_back(t.token);
    if (r->params.logprobs) o->new_logprobs.push_back(t);
    ++stats_.generated_tokens;
    o->finish_reason = take_token(r, t);
    // A complete grammar closed by EOS ends the request even with ignore_eos.
    if (o->finish_reason == FinishReason::kNone && constraint && constraint->finished())
      o->finish_reason = FinishReason::kStop;
    return o->finish_reason == FinishReason::kNone;
  };
  if (r->params.max_tokens == 0) {  // only the prompt's scores were wanted
    o->finish_reason = FinishReason::kLength;
    return 0;
  }
  const int64_t first = c.start + c.num_tokens - c.draft_rows - 1;  // position of logit row 0
  // Drafts drawn from a distribution q (DSpark at the request's
  // temperature) are verified by the p/q rule, greedy ones as a point mass.
  const auto sampled_drafts = draft_logits_.find(r->id);
  std::vector<float> q;
  // Row i verifies draft i: kept, the next row's logits go on; rejected,
  // the target's own token ends the run. All kept: the last row adds one.
  int64_t kept = 0;
  for (int64_t i = 0; i <= c.draft_rows; ++i) {
    SampledLogits& s = rows[i];
    if (observer_ && s.argmax < 0) observer_(r->id, first + i, s.logits.data());
    if (constraint && constraint->active()) {
      // Rows are masked one at a time: row i's grammar state is the one
      // after the drafts kept before it. A draft the grammar forbids has
      // no probability, so verification rejects it.
      PhaseTimer::Scope masking(Phase::kGrammar);
      raw.clear();
      if (r->params.logprobs) raw = s.logits;
      if (!constraint->mask(s.logits.data(), r->params.max_tokens - static_cast<int64_t>(r->output.size()))) {
        o->finish_reason = FinishReason::kAbort;
        o->error = "the grammar allows no token of the vocabulary after " + std::to_string(r->output.size()) +
                   " output tokens (it needs bytes no token spells)";
        break;
      }
    }
    SampledToken t;
    bool accepted = false;
    if (i == c.draft_rows) {
      if (s.argmax >= 0) t.token = s.argmax;
      else t = sample_token(s.logits.data(), vocab, r->params, r->prompt, r->output, &rngs_.at(r->id));
    } else if (s.argmax >= 0) {
      t.token = s.argmax;
      accepted = t.token == r->draft[i];
    } else if (sampled_drafts != draft_logits_.end()) {
      softmax_at_temperature(&sampled_drafts->second[i * vocab], vocab, r->params.temperature, &q);
      t = sample_against_distribution(s.logits.data(), vocab, r->params, r->prompt, r->output, r->draft[i], q.data(),
                                      &rngs_.at(r->id), &accepted);
    } else {
      t = sample_against_draft(s.logits.data(), vocab, r->params, r->prompt, r->output, r->draft[i],
                               &rngs_.at(r->id), &accepted);
    }
    if (i < c.draft_rows) stats_.accepted_at[i] += accepted;
    kept += accepted;
    if (!emit(t) || !accepted) break;
  }
  if (c.draft_rows > 0) {
    r->drafts_proposed += c.draft_rows;
    r->drafts_accepted += kept;
    stats_.drafts_proposed += c.draft_rows;
    stats_.drafts_accepted += kept;
    ++stats_.verify_chunks;
    for (int64_t i = 0; i < c.draft_rows; ++i) ++stats_.proposed_at[i];
  }
  r->draft.clear();
  if (sampled_drafts != draft_logits_.end()) draft_logits_.erase(sampled_drafts);
  return kept;
}

void Engine::score_prompt(const ScheduledChunk& c, const SampledLogits* rows, RequestOutput* o) {
  PhaseTimer::Scope time(Phase::kSampling);
  Request* r = c.request;
  const int64_t prompt = static_cast<int64_t>(r->prompt.size());
  // Row i (position c.start + i) predicts the token at c.start + i + 1.
  const int64_t from = std::max(r->prompt_scored, c.start + 1);
  const int64_t to = std::min(prompt, c.start + c.num_tokens + 1);
  o->prompt_from = from;
  for (int64_t pos = from; pos < to; ++pos)
    o->prompt_logprobs.push_back(score_token(rows[pos - 1 - c.start].logits.data(), config().vocab_size,
                                             r->prompt[pos], *r->params.prompt_logprobs));
  r->prompt_scored = std::max(r->prompt_scored, to);
}

std::vector<RequestOutput> Engine::step() {
  std::vector<RequestOutput> outputs;
  SchedulerOutput schedule = scheduler_->schedule();
  last_step_.clear();
  for (const ScheduledChunk& c : schedule.chunks) last_step_.push_back(c.request->id);
  stats_.preemptions += static_cast<int64_t>(schedule.preempted.size());
  if (schedule.chunks.empty()) {
    // Nothing runs and nothing can be admitted: a waiting request does not
    // fit even an empty cache.
    if (scheduler_->has_unfinished()) abort_unfittable(&outputs);
    return outputs;
  }
  ++stats_.steps;
  stats_.prefix_queried_tokens = scheduler_->prefix_queried_tokens();
  stats_.prefix_hit_tokens = scheduler_->prefix_hit_tokens();
  for (const ScheduledChunk& c : schedule.chunks) {
    const Request* r = c.request;
    stats_.prompt_tokens += std::max<int64_t>(0, std::min<int64_t>(c.start + c.num_tokens, r->prompt.size()) - c.start);
  }

  // Every group steps (the experts span them), idle ones with no chunks.
  StepPlan plan = plan_step(schedule);
  StatusOr<std::vector<SampledLogits>> sampled = executor_->run(plan);
  DSV4_CHECK_MSG(sampled.ok(), "%s", sampled.status().message().c_str());

  size_t next = 0;
  std::vector<int64_t> committed(schedule.chunks.size(), 0);  // rows each chunk committed
  std::vector<uint8_t> finished(schedule.chunks.size(), 0);
  for (size_t ci = 0; ci < schedule.chunks.size(); ++ci) {
    const ScheduledChunk& c = schedule.chunks[ci];
    const PlannedChunk& planned = plan.chunks[ci];
    Request* r = c.request;
    SampledLogits* rows = sampled->data() + next;
    next += static_cast<size_t>(planned.logit_rows());
    committed[ci] = c.num_tokens - c.draft_rows;
    RequestOutput o;
    o.id = r->id;
    if (planned.all_logits) score_prompt(c, rows, &o);
    if (!c.samples) {
      scheduler_->commit(c, committed[ci], !speculative());
      if (!o.prompt_logprobs.empty()) outputs.push_back(std::move(o));
      continue;
    }
    // The sampling rows are the chunk's last.
    committed[ci] += sample_chunk(c, rows + planned.logit_rows() - (1 + c.draft_rows), &o);
    scheduler_->commit(c, committed[ci], !speculative());
    o.prompt_tokens = static_cast<int64_t>(r->prompt.size());
    o.completion_tokens = static_cast<int64_t>(r->output.size());
    o.cached_tokens = r->cached_tokens;
    o.drafts_proposed = r->drafts_proposed;
    o.drafts_accepted = r->drafts_accepted;
    if (o.finish_reason != FinishReason::kNone) {
      o.finished = true;
      finished[ci] = 1;
      // A drafter still takes its committed rows (below): a block they
      // complete may serve later requests from the prefix cache.
      if (!speculative()) finish(r->id, o.finish_reason);
    }
    outputs.push_back(std::move(o));
  }
  if (speculative()) {
    draft(schedule, committed, finished);
    for (const RequestOutput& o : outputs)
      if (o.finished) finish(o.id, o.finish_reason);
  }
  return outputs;
}

void Engine::draft(const SchedulerOutput& schedule, const std::vector<int64_t>& committed,
                   const std::vector<uint8_t>& finished) {
  StepPlan plan;
  plan.draft = true;
  plan.dspark = dspark();
  plan.keep_raw_kv = executor_->cache(0)->keeps_all_raw_kv();
  const int k = scheduler_->options().num_speculative_tokens;
  for (size_t ci = 0; ci < schedule.chunks.size(); ++ci) {
    const ScheduledChunk& c = schedule.chunks[ci];
    Request* r = c.request;
    PlannedChunk job;
    job.group = c.partition;
    job.start = c.start;
    job.prefill_len = static_cast<int64_t>(r->prompt.size());
    job.cached_until = r->cached_tokens;
    job.source = static_cast<int32_t>(ci);
    // Row i carries the token after it: the prompt's, or the one just chosen
    // (a request that finished without choosing one, as a prompt-only
    // scoring request, has no token after its last row: that row is left out).
    for (int64_t i = 0; i < committed[ci] && c.start + i + 1 < r->num_tokens(); ++i)
      job.tokens.push_back(r->token(c.start + i + 1));
    // A decoding request drafts for its next step, within its max_tokens,
    // when its pages reach that far.
    if (!finished[ci] && r->num_computed == r->num_tokens() - 1) {
      const int64_t room = r->params.max_tokens - static_cast<int64_t>(r->output.size()) - 1;
      const int64_t drafts = std::min<int64_t>(k, room);
      // DSpark drafts from the last committed position p >= 1 (a call at 0
      // is the reference's prefill: rings only), its block p+1..p+K within
      // the model's positions.
      const int64_t p = c.start + committed[ci] - 1;
      const bool can = !dspark() || (p >= 1 && p + 1 + config().dspark_block_size <= config().max_position_embeddings);
      if (can && drafts > 0 && scheduler_->reserve(r, r->num_computed + drafts + 1)) job.drafts = static_cast<int32_t>(drafts);
      if (dspark() && !r->params.greedy()) {
        job.draft_temperature = r->params.temperature;
        job.draft_seed = rngs_.at(r->id)();
      }
    }
    job.pages = r->pages;
    plan.chunks.push_back(std::move(job));
  }
  StatusOr<std::vector<SampledLogits>> drafted = executor_->run(plan);
  DSV4_CHECK_MSG(drafted.ok(), "%s", drafted.status().message().c_str());
  size_t next = 0;
  for (const PlannedChunk& job : plan.chunks) {
    Request* r = schedule.chunks[job.source].request;
    scheduler_->release_behind_window(r);  // the MTP block has read its window
    if (job.drafts <= 0) continue;
    SampledLogits& d = (*drafted)[next++];
    // The confidence head shortens the run: up to the first draft the
    // drafter doubts (sigmoid(c_k) < threshold; DeepSpec's rule).
    const float threshold = scheduler_->options().confidence_threshold;
    size_t n = d.drafts.size();
    if (threshold > 0.0f)
      for (n = 0; n < d.drafts.size() && n < d.draft_confidence.size(); ++n)
        if (1.0f / (1.0f + std::exp(-d.draft_confidence[n])) < threshold) break;
    // Drafts past the first the grammar forbids cannot be kept: not verified.
    if (auto it = constraints_.find(r->id); it != constraints_.end()) {
      PhaseTimer::Scope masking(Phase::kGrammar);
      d.drafts.resize(n);
      n = static_cast<size_t>(it->second.allowed_prefix(d.drafts));
    }
    d.drafts.resize(n);
    r->draft = std::move(d.drafts);
    draft_logits_.erase(r->id);
    if (!d.draft_logits.empty() && n > 0) {
      d.draft_logits.resize(n * config().vocab_size);
      draft_logits_[r->id] = std::move(d.draft_logits);
    }
    if (draft_observer_) draft_observer_(r->id, job.start + static_cast<int64_t>(job.tokens.size()) - 1, r->draft);
  }
}

}  // namespace dsv4
