#include "runtime/engine.h"

#include <algorithm>

#include "base/check.h"
#include "model/forward_batch.h"

namespace dsv4 {

StatusOr<std::unique_ptr<Engine>> Engine::create(const DeepseekV4* model, const EngineOptions& options) {
  const ModelConfig& c = model->config();
  SchedulerOptions sched = options.scheduler;
  if (sched.max_model_len <= 0) sched.max_model_len = c.max_position_embeddings;
  if (sched.max_model_len > c.max_position_embeddings)
    return invalid_argument("max-model-len " + std::to_string(sched.max_model_len) + " exceeds the model's " +
                            std::to_string(c.max_position_embeddings) + " positions");
  if (sched.max_num_seqs <= 0 || sched.max_num_batched_tokens <= 0)
    return invalid_argument("max-num-seqs and max-num-batched-tokens must be positive");
  KvCacheOptions cache = options.cache;
  cache.max_num_seqs = sched.max_num_seqs;
  cache.max_num_batched_tokens = sched.max_num_batched_tokens;
  DSV4_ASSIGN_OR_RETURN(auto kv, KvCacheManager::create(CacheGeometry::of(c), cache));
  return std::unique_ptr<Engine>(new Engine(model, std::move(kv), sched));
}

Engine::Engine(const DeepseekV4* model, std::unique_ptr<KvCacheManager> kv, const SchedulerOptions& options)
    : model_(model), kv_(std::move(kv)), scheduler_(std::make_unique<Scheduler>(options, kv_.get())) {}

StatusOr<int64_t> Engine::add_request(std::vector<int32_t> prompt, const SamplingParams& params) {
  const int64_t vocab = model_->config().vocab_size;
  DSV4_RETURN_IF_ERROR(params.validate(vocab));
  for (int32_t t : prompt)
    if (t < 0 || t >= vocab)
      return invalid_argument("prompt token " + std::to_string(t) + " is outside the vocabulary of " +
                              std::to_string(vocab));
  auto r = std::make_unique<Request>();
  r->id = next_id_;
  r->prompt = std::move(prompt);
  r->params = params;
  DSV4_RETURN_IF_ERROR(scheduler_->add(std::move(r)));
  rngs_[next_id_] = params.seed ? std::mt19937_64(*params.seed) : std::mt19937_64(std::random_device{}());
  return next_id_++;
}

bool Engine::finish(int64_t id, FinishReason reason) {
  rngs_.erase(id);
  return scheduler_->finish(id, reason);
}

std::string Engine::capacity_summary() const {
  std::string s = kv_->summary();
  const int64_t len = scheduler_->options().max_model_len;
  if (kv_->token_capacity() >= 0) {
    const int64_t full = std::min<int64_t>(kv_->token_capacity() / len, scheduler_->options().max_num_seqs);
    s += "\n  " + std::to_string(full) + " requests of max-model-len " + std::to_string(len) + " fit at once";
  }
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
  const int eos = model_->config().eos_token_id;
  if (!p.ignore_eos && t.token == eos) return FinishReason::kStop;
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t.token) != p.stop_token_ids.end())
    return FinishReason::kStop;
  if (static_cast<int64_t>(r->output.size()) >= p.max_tokens) return FinishReason::kLength;
  return FinishReason::kNone;
}

std::vector<RequestOutput> Engine::step() {
  std::vector<RequestOutput> outputs;
  SchedulerOutput plan = scheduler_->schedule();
  last_step_.clear();
  for (const ScheduledChunk& c : plan.chunks) last_step_.push_back(c.request->id);
  stats_.preemptions += static_cast<int64_t>(plan.preempted.size());
  if (plan.chunks.empty()) {
    // Nothing runs and nothing can be admitted: the first waiting request
    // does not fit even an empty cache.
    if (scheduler_->has_unfinished() && scheduler_->num_running() == 0) {
      if (Request* r = scheduler_->next_waiting()) {
        RequestOutput o;
        o.id = r->id;
        o.finished = true;
        o.finish_reason = FinishReason::kAbort;
        o.error = "the request needs more KV cache pages than the whole cache has";
        o.prompt_tokens = static_cast<int64_t>(r->prompt.size());
        finish(r->id, FinishReason::kAbort);
        outputs.push_back(std::move(o));
      }
    }
    return outputs;
  }
  ++stats_.steps;

  // One packed forward over every chunk, each with its own paged cache.
  ForwardBatch batch;
  std::vector<std::unique_ptr<PagedSequenceCache>> caches;
  std::vector<int32_t> tokens;
  for (const ScheduledChunk& c : plan.chunks) {
    Request* r = c.request;
    caches.push_back(std::make_unique<PagedSequenceCache>(kv_.get(), &r->pages, c.start));
    tokens.resize(c.num_tokens);
    for (int64_t i = 0; i < c.num_tokens; ++i) tokens[i] = r->token(c.start + i);
    // Prompt positions keep the prompt's one-shot layout, also when
    // recomputed after a preemption (see ReferenceRows).
    batch.add(caches.back().get(), tokens.data(), c.num_tokens, static_cast<int64_t>(r->prompt.size()));
    stats_.prompt_tokens += std::max<int64_t>(0, std::min<int64_t>(c.start + c.num_tokens, r->prompt.size()) - c.start);
  }
  ForwardOutput fwd;
  const Status st = model_->forward(batch, &fwd);
  DSV4_CHECK_MSG(st.ok(), st.message().c_str());

  const int64_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    Request* r = c.request;
    scheduler_->commit(c);
    if (!c.samples) continue;
    const float* logits = &fwd.logits[i * vocab];
    const int64_t position = c.start + c.num_tokens - 1;
    if (observer_) observer_(r->id, position, logits);
    const SampledToken t = sample_token(logits, vocab, r->params, r->prompt, r->output, &rngs_.at(r->id));
    const FinishReason reason = take_token(r, t);
    ++stats_.generated_tokens;
    RequestOutput o;
    o.id = r->id;
    o.new_tokens.push_back(t.token);
    if (r->params.logprobs) o.new_logprobs.push_back(t);
    o.prompt_tokens = static_cast<int64_t>(r->prompt.size());
    o.completion_tokens = static_cast<int64_t>(r->output.size());
    if (reason != FinishReason::kNone) {
      o.finished = true;
      o.finish_reason = reason;
      finish(r->id, reason);
    }
    outputs.push_back(std::move(o));
  }
  return outputs;
}

}  // namespace dsv4
