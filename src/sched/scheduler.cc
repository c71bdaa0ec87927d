#include "sched/scheduler.h"

#include <algorithm>

#include "base/check.h"

namespace dsv4 {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kNone: break;
  }
  return "none";
}

Status Scheduler::add(std::unique_ptr<Request> r) {
  const int64_t prompt = static_cast<int64_t>(r->prompt.size()), limit = options_.max_model_len;
  if (prompt == 0) return invalid_argument("the prompt is empty");
  if (prompt >= limit)
    return invalid_argument("the prompt has " + std::to_string(prompt) + " tokens; max-model-len is " +
                            std::to_string(limit) + " and leaves no room to generate");
  if (prompt + r->params.max_tokens > limit)
    return invalid_argument("this model's maximum context length is " + std::to_string(limit) + " tokens, but " +
                            std::to_string(prompt + r->params.max_tokens) + " were requested (" +
                            std::to_string(prompt) + " in the prompt, " + std::to_string(r->params.max_tokens) +
                            " to generate)");
  if (requests_.count(r->id)) return invalid_argument("request id " + std::to_string(r->id) + " is already in use");
  r->status = RequestStatus::kWaiting;
  waiting_.push_back(r.get());
  requests_[r->id] = std::move(r);
  return Status::Ok();
}

int64_t Scheduler::chunk_size(const Request& r, int64_t budget) const {
  int64_t n = std::min(r.num_tokens() - r.num_computed, budget);
  if (options_.long_prefill_token_threshold > 0) n = std::min(n, options_.long_prefill_token_threshold);
  return n;
}

void Scheduler::preempt(Request* r) {
  kv_->free(&r->pages);
  r->num_computed = 0;
  r->status = RequestStatus::kWaiting;
  ++r->num_preemptions;
  running_.erase(std::find(running_.begin(), running_.end(), r));
  waiting_.push_front(r);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = options_.max_num_batched_tokens;
  // Running requests first, oldest first; preempt from the newest end.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request* r = running_[i];
    const int64_t n = chunk_size(*r, budget);
    if (n <= 0) continue;
    bool scheduled = true;
    while (!kv_->allocate(&r->pages, r->num_computed + n)) {
      Request* victim = running_.back();
      out.preempted.push_back(victim->id);
      preempt(victim);
      if (victim == r) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;
    out.chunks.push_back({r, r->num_computed, n, r->num_computed + n == r->num_tokens()});
    budget -= n;
  }
  // Then admit waiting requests in arrival order (none after a preemption:
  // the pages are short).
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < options_.max_num_seqs) {
    Request* r = waiting_.front();
    const int64_t n = chunk_size(*r, budget);
    if (!kv_->allocate(&r->pages, r->num_computed + n)) break;
    waiting_.pop_front();
    r->status = RequestStatus::kRunning;
    running_.push_back(r);
    out.chunks.push_back({r, r->num_computed, n, r->num_computed + n == r->num_tokens()});
    budget -= n;
  }
  return out;
}

void Scheduler::commit(const ScheduledChunk& c) {
  Request* r = c.request;
  DSV4_CHECK(r->status == RequestStatus::kRunning && c.start == r->num_computed);
  r->num_computed += c.num_tokens;
  kv_->release_behind_window(&r->pages, r->num_computed);
}

bool Scheduler::finish(int64_t id, FinishReason reason) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  Request* r = it->second.get();
  kv_->free(&r->pages);
  if (r->status == RequestStatus::kRunning) running_.erase(std::find(running_.begin(), running_.end(), r));
  if (r->status == RequestStatus::kWaiting) waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
  r->status = RequestStatus::kFinished;
  r->finish = reason;
  requests_.erase(it);
  return true;
}

bool Scheduler::preempt(int64_t id) {
  Request* r = find(id);
  if (!r || r->status != RequestStatus::kRunning) return false;
  preempt(r);
  return true;
}

Request* Scheduler::find(int64_t id) {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

}  // namespace dsv4
