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

Scheduler::Scheduler(const SchedulerOptions& options, const std::vector<KvCacheManager*>& partitions)
    : options_(options) {
  DSV4_CHECK(!partitions.empty());
  for (KvCacheManager* kv : partitions) parts_.push_back({kv, {}, {}});
}

int Scheduler::least_loaded() const {
  // Fewest requests, then fewest tokens still to compute, then the first.
  int best = 0;
  std::pair<int64_t, int64_t> best_load{INT64_MAX, INT64_MAX};
  for (int p = 0; p < num_partitions(); ++p) {
    std::pair<int64_t, int64_t> load{0, 0};
    load.first = static_cast<int64_t>(parts_[p].running.size() + parts_[p].waiting.size());
    for (const Request* r : parts_[p].running) load.second += r->num_tokens() - r->num_computed;
    for (const Request* r : parts_[p].waiting) load.second += r->num_tokens() - r->num_computed;
    if (load < best_load) best_load = load, best = p;
  }
  return best;
}

int64_t Scheduler::num_running() const {
  int64_t n = 0;
  for (const Partition& p : parts_) n += static_cast<int64_t>(p.running.size());
  return n;
}

int64_t Scheduler::num_waiting() const {
  int64_t n = 0;
  for (const Partition& p : parts_) n += static_cast<int64_t>(p.waiting.size());
  return n;
}

Request* Scheduler::next_waiting(int partition) {
  auto& w = parts_[partition].waiting;
  return w.empty() ? nullptr : w.front();
}

Status Scheduler::check(const std::vector<int32_t>& prompt_ids, int64_t max_tokens) const {
  const int64_t prompt = static_cast<int64_t>(prompt_ids.size()), limit = options_.max_model_len;
  if (prompt == 0) return invalid_argument("the prompt is empty");
  if (prompt >= limit && max_tokens > 0)
    return invalid_argument("the prompt has " + std::to_string(prompt) + " tokens; max-model-len is " +
                            std::to_string(limit) + " and leaves no room to generate");
  if (prompt + max_tokens > limit)
    return invalid_argument("this model's maximum context length is " + std::to_string(limit) + " tokens, but " +
                            std::to_string(prompt + max_tokens) + " were requested (" + std::to_string(prompt) +
                            " in the prompt, " + std::to_string(max_tokens) + " to generate)");
  return Status::Ok();
}

Status Scheduler::add(std::unique_ptr<Request> r) {
  DSV4_RETURN_IF_ERROR(check(r->prompt, r->params.max_tokens));
  if (requests_.count(r->id)) return invalid_argument("request id " + std::to_string(r->id) + " is already in use");
  r->status = RequestStatus::kWaiting;
  // The partition caching the longest prefix of it, else the least loaded.
  r->partition = least_loaded();
  int64_t best = prefix_hit(r->partition, *r);
  for (int p = 0; p < num_partitions(); ++p) {
    const int64_t hit = prefix_hit(p, *r);
    if (hit > best) best = hit, r->partition = p;
  }
  parts_[r->partition].waiting.push_back(r.get());
  requests_[r->id] = std::move(r);
  return Status::Ok();
}

int64_t Scheduler::chunk_size(const Request& r, int64_t budget) const {
  const int64_t left = r.num_tokens() - r.num_computed;
  // A decode verifies its drafts in the same chunk.
  const int64_t rows = left == 1 ? 1 + static_cast<int64_t>(r.draft.size()) : left;
  int64_t n = std::min(rows, budget);
  if (left > 1 && options_.long_prefill_token_threshold > 0) n = std::min(n, options_.long_prefill_token_threshold);
  return n;
}

int64_t Scheduler::draft_rows(const Request& r, int64_t n) {
  return std::max<int64_t>(0, r.num_computed + n - r.num_tokens());
}

int64_t Scheduler::prefix_hit(int partition, const Request& r) {
  PrefixCache* cache = parts_[partition].kv->prefix_cache();
  if (!cache || r.params.prompt_logprobs) return 0;  // scoring the prompt needs each row's logits
  return static_cast<int64_t>(cache->match(r.tokens(), (r.num_tokens() - 1) / kBlockTokens).size()) * kBlockTokens;
}

void Scheduler::take_prefix(Request* r) {
  PrefixCache* cache = parts_[r->partition].kv->prefix_cache();
  if (!cache || r->num_computed > 0 || r->pages.covered > 0 || r->params.prompt_logprobs) return;
  const std::vector<uint64_t> keys = cache->match(r->tokens(), (r->num_tokens() - 1) / kBlockTokens);
  if (keys.empty()) return;
  cache->attach(keys, &r->pages);
  r->cached_tokens = static_cast<int64_t>(keys.size()) * kBlockTokens;
  r->num_computed = r->resumed_from =
      r->cached_tokens - parts_[r->partition].kv->layout().geometry.prefix_replay_tokens();
  r->blocks_seen = static_cast<int64_t>(keys.size());
  r->last_block_key = keys.back();
}

void Scheduler::undo_prefix(Request* r) {
  if (r->cached_tokens == 0) return;
  parts_[r->partition].kv->free(&r->pages);
  r->num_computed = r->cached_tokens = r->resumed_from = r->blocks_seen = 0;
  r->last_block_key = 0;
}

void Scheduler::cache_blocks(Request* r) {
  PrefixCache* cache = parts_[r->partition].kv->prefix_cache();
  if (!cache) return;
  std::vector<int32_t> ids(kBlockTokens);
  for (int64_t k = r->blocks_seen; (k + 1) * kBlockTokens <= r->num_computed; ++k) {
    for (int64_t i = 0; i < kBlockTokens; ++i) ids[i] = r->token(k * kBlockTokens + i);
    r->last_block_key = cache->insert(r->last_block_key, k, ids.data(), r->pages);
    r->blocks_seen = k + 1;
  }
}

void Scheduler::preempt(Request* r) {
  Partition& part = parts_[r->partition];
  part.kv->free(&r->pages);
  r->num_computed = r->cached_tokens = r->resumed_from = r->blocks_seen = 0;
  r->last_block_key = 0;
  r->draft.clear();
  // A paused request stays paused: it is not admitted again until resumed.
  r->status = RequestStatus::kWaiting;
  ++r->num_preemptions;
  part.running.erase(std::find(part.running.begin(), part.running.end(), r));
  part.waiting.push_front(r);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  for (int p = 0; p < num_partitions(); ++p) schedule(p, &out);
  return out;
}

void Scheduler::schedule(int partition, SchedulerOutput* all) {
  Partition& part = parts_[partition];
  std::vector<Request*>& running = part.running;
  std::deque<Request*>& waiting = part.waiting;
  SchedulerOutput out;
  int64_t budget = options_.max_num_batched_tokens;
  // Running requests first, oldest first; preempt from the newest end, a
  // paused one (its client is behind) before any that runs.
  int64_t paused = 0;
  for (const Request* r : running) paused += r->paused;
  // The newest paused request, preempted to free pages (it stays paused
  // among the waiting, and recomputes when resumed); false when none is.
  auto preempt_paused = [&] {
    for (auto it = running.rbegin(); paused > 0 && it != running.rend(); ++it)
      if ((*it)->paused) {
        Request* victim = *it;
        --paused;
        out.preempted.push_back(victim->id);
        preempt(victim);
        return true;
      }
    return false;
  };
  bool pressure = false;  // a running request was preempted: admit none
  // Over a copy: preempting a paused request takes it out of the middle.
  const std::vector<Request*> order = running;
  for (size_t i = 0; i < order.size() && budget > 0; ++i) {
    Request* r = order[i];
    if (r->paused || r->status != RequestStatus::kRunning) continue;
    const int64_t n = chunk_size(*r, budget);
    if (n <= 0) continue;
    bool scheduled = true;
    while (!part.kv->allocate(&r->pages, r->num_computed + n)) {
      if (preempt_paused()) continue;
      pressure = true;
      Request* victim = running.back();
      out.preempted.push_back(victim->id);
      preempt(victim);
      if (victim == r) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;
    const int64_t drafts = draft_rows(*r, n);
    out.chunks.push_back({r, partition, r->num_computed, n, drafts, r->num_computed + n - drafts == r->num_tokens()});
    budget -= n;
  }
  // Then admit waiting requests in arrival order (none after a preemption:
  // the pages are short). Paused requests take no step, so they take no
  // place among max_num_seqs; a paused one waiting is passed over.
  auto next = [&]() -> std::deque<Request*>::iterator {
    auto it = waiting.begin();
    while (it != waiting.end() && (*it)->paused) ++it;
    return it;
  };
  for (auto it = next(); !pressure && it != waiting.end() && budget > 0 &&
                         static_cast<int64_t>(running.size()) - paused < options_.max_num_seqs;
       it = next()) {
    Request* r = *it;
    take_prefix(r);
    const int64_t n = chunk_size(*r, budget);
    bool got = part.kv->allocate(&r->pages, r->num_computed + n);
    while (!got && preempt_paused()) got = part.kv->allocate(&r->pages, r->num_computed + n);
    if (!got) {
      undo_prefix(r);
      break;
    }
    if (part.kv->prefix_cache()) {
      prefix_queried_ += static_cast<int64_t>(r->prompt.size());
      prefix_hit_ += std::min<int64_t>(r->cached_tokens, r->prompt.size());
    }
    waiting.erase(it);
    r->status = RequestStatus::kRunning;
    running.push_back(r);
    const int64_t drafts = draft_rows(*r, n);
    out.chunks.push_back({r, partition, r->num_computed, n, drafts, r->num_computed + n - drafts == r->num_tokens()});
    budget -= n;
  }
  all->chunks.insert(all->chunks.end(), out.chunks.begin(), out.chunks.end());
  all->preempted.insert(all->preempted.end(), out.preempted.begin(), out.preempted.end());
}

void Scheduler::commit(const ScheduledChunk& c, int64_t rows, bool release_window) {
  Request* r = c.request;
  DSV4_CHECK(r->status == RequestStatus::kRunning && c.start == r->num_computed);
  DSV4_CHECK(rows >= c.num_tokens - c.draft_rows && rows <= c.num_tokens);
  r->num_computed += rows;
  cache_blocks(r);  // before the window release: a block keeps its raw window
  if (release_window) release_behind_window(r);
}

bool Scheduler::finish(int64_t id, FinishReason reason) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  Request* r = it->second.get();
  Partition& part = parts_[r->partition];
  part.kv->free(&r->pages);
  if (r->status == RequestStatus::kRunning) part.running.erase(std::find(part.running.begin(), part.running.end(), r));
  if (r->status == RequestStatus::kWaiting) part.waiting.erase(std::find(part.waiting.begin(), part.waiting.end(), r));
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

bool Scheduler::pause(int64_t id) {
  Request* r = find(id);
  if (!r || r->status == RequestStatus::kFinished) return false;
  r->paused = true;
  return true;
}

bool Scheduler::resume(int64_t id) {
  Request* r = find(id);
  if (!r || !r->paused) return false;
  r->paused = false;
  return true;
}

Request* Scheduler::find(int64_t id) {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

}  // namespace dsv4
