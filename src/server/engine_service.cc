#include "server/engine_service.h"

#include <chrono>

#include "base/logging.h"

namespace dsv4 {

void EventChannel::push(ChoiceEvent e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
    if (on_push_) on_push_();
  }
  cv_.notify_one();
}

void EventChannel::clear_listener() {
  std::lock_guard<std::mutex> lock(mu_);
  on_push_ = nullptr;
}

bool EventChannel::pop(ChoiceEvent* e, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout_ms <= 0) {
    if (events_.empty()) return false;
  } else if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !events_.empty(); })) {
    return false;
  }
  *e = std::move(events_.front());
  events_.pop_front();
  return true;
}

EngineService::EngineService(std::unique_ptr<Engine> engine, const EngineServiceOptions& options)
    : engine_(std::move(engine)), options_(options) {
  publish_snapshot();
  thread_ = std::thread([this] { loop(); });
}

EngineService::~EngineService() { shutdown(0); }

StatusOr<std::vector<int64_t>> EngineService::submit(std::vector<ChoiceRequest> choices,
                                                     std::shared_ptr<EventChannel> channel) {
  // The engine's checks need only its options: done here, so a bad request
  // is answered now and a queued one is sure to be taken.
  for (const ChoiceRequest& c : choices) DSV4_RETURN_IF_ERROR(engine_->check_request(c.prompt, c.params));
  const int64_t n = static_cast<int64_t>(choices.size());
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return out_of_range("the server is shutting down");
  // A request is admitted whole: into an empty queue whatever its size (so
  // a large batch is never refused by an idle server), else while the queue
  // keeps within max_queue.
  const int64_t waiting = engine_waiting_ + static_cast<int64_t>(submits_.size());
  if (waiting > 0 && waiting + n > options_.max_queue)
    return resource_exhausted("the server is overloaded: " + std::to_string(waiting) +
                              " requests are already waiting (--max-queue " + std::to_string(options_.max_queue) + ")");
  std::vector<int64_t> ids;
  for (int i = 0; i < n; ++i) {
    const int64_t id = next_id_++;
    routes_[id] = {channel, i};
    submits_.push_back({id, std::move(choices[i])});
    ids.push_back(id);
  }
  work_.notify_one();
  return ids;
}

void EngineService::finish(int64_t id, FinishReason reason) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = routes_.find(id);
  if (it == routes_.end()) return;  // already done
  ChoiceEvent e;
  e.choice = it->second.choice;
  e.output.id = id;
  e.output.finished = true;
  e.output.finish_reason = reason;
  it->second.channel->push(std::move(e));
  routes_.erase(it);
  // Still queued: it never reaches the engine. Otherwise the loop ends it
  // at the next step boundary.
  for (auto s = submits_.begin(); s != submits_.end(); ++s)
    if (s->id == id) {
      submits_.erase(s);
      return;
    }
  finishes_.emplace_back(id, reason);
  work_.notify_one();
}

void EngineService::hold(int64_t id, bool held) {
  std::lock_guard<std::mutex> lock(mu_);
  holds_.emplace_back(id, held);
  work_.notify_one();
}

bool EngineService::accepting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return accepting_;
}

void EngineService::drain_inbox() {
  std::vector<Pending> submits;
  std::vector<std::pair<int64_t, FinishReason>> finishes;
  std::vector<std::pair<int64_t, bool>> holds;
  {
    std::lock_guard<std::mutex> lock(mu_);
    submits.swap(submits_);
    finishes.swap(finishes_);
    holds.swap(holds_);
    // They wait in the engine now; until the step's snapshot says how many
    // it admitted, admission counts them as waiting (else a submit in
    // between would find the queue empty).
    engine_waiting_ += static_cast<int64_t>(submits.size());
  }
  for (Pending& p : submits) {
    const int64_t prompt_tokens = static_cast<int64_t>(p.request.prompt.size());
    StatusOr<int64_t> eid = engine_->add_request(std::move(p.request.prompt), p.request.params);
    if (eid.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      engine_ids_[p.id] = *eid;
      service_ids_[*eid] = p.id;
      continue;
    }
    RequestOutput o;  // checked at submit, so this is a bug; the client hears of it
    o.finished = true;
    o.finish_reason = FinishReason::kAbort;
    o.error = eid.status().message();
    o.prompt_tokens = prompt_tokens;
    log_error("request " + std::to_string(p.id) + " refused by the engine: " + o.error);
    deliver(p.id, std::move(o));
  }
  for (const auto& [id, reason] : finishes) {
    held_.erase(id);
    int64_t eid = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = engine_ids_.find(id);
      if (it == engine_ids_.end()) continue;
      eid = it->second;
      engine_ids_.erase(it);
      service_ids_.erase(eid);
    }
    engine_->finish(eid, reason);
  }
  // Holds: paused in the scheduler (running or waiting; a preemption keeps
  // it paused) until let go.
  for (const auto& [id, held] : holds) {
    const int64_t eid = engine_id(id);
    if (held && eid >= 0 && engine_->pause(eid)) {
      held_.insert(id);
    } else if (!held && held_.erase(id) && eid >= 0) {
      engine_->resume(eid);
    }
  }
}

int64_t EngineService::engine_id(int64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = engine_ids_.find(id);
  return it == engine_ids_.end() ? -1 : it->second;
}

void EngineService::deliver(int64_t id, RequestOutput o) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = routes_.find(id);
  if (it == routes_.end()) return;  // finished by its handler meanwhile
  o.id = id;
  const bool done = o.finished;
  it->second.channel->push({it->second.choice, std::move(o)});
  if (!done) return;
  held_.erase(id);
  routes_.erase(it);
  auto e = engine_ids_.find(id);
  if (e != engine_ids_.end()) {
    service_ids_.erase(e->second);
    engine_ids_.erase(e);
  }
}

void EngineService::publish_snapshot() {
  EngineSnapshot s;
  s.running = engine_->scheduler().num_running();
  s.waiting = engine_->scheduler().num_waiting();
  s.held = static_cast<int64_t>(held_.size());
  s.stats = engine_->stats();
  // The cache's usage walks every prefix-cache block: while steps run it is
  // refreshed at most every 100 ms (per step, thousands of cached blocks
  // cost more than a small model's step), and always once they stop.
  const auto now = std::chrono::steady_clock::now();
  if (engine_->has_unfinished() && now - usage_time_ < std::chrono::milliseconds(100)) {
    std::lock_guard<std::mutex> lock(mu_);
    s.cache_usage = snapshot_.cache_usage;
    s.prefix_cache_blocks = snapshot_.prefix_cache_blocks;
    engine_waiting_ = s.waiting;
    snapshot_ = std::move(s);
    return;
  }
  usage_time_ = now;
  for (int g = 0; g < engine_->num_groups(); ++g)
    if (engine_->cache(g).prefix_cache()) s.prefix_cache_blocks += engine_->cache(g).prefix_cache()->num_blocks();
  for (int f = 0; f < kNumCacheFamilies; ++f) {  // over every data-parallel group's cache
    int64_t pages = 0, free = 0;
    for (int g = 0; g < engine_->num_groups(); ++g) {
      KvCacheManager& kv = engine_->cache(g);
      const PagePool& p = kv.pool(static_cast<CacheFamily>(f));
      pages += p.num_pages();
      // Pages only the prefix cache keeps are free for the asking.
      free += p.free_pages() + (kv.prefix_cache() ? kv.prefix_cache()->pages_held_alone(static_cast<CacheFamily>(f)) : 0);
    }
    if (pages == 0) continue;
    s.cache_usage.emplace_back(family_name(static_cast<CacheFamily>(f)), 1.0 - static_cast<double>(free) / pages);
  }
  std::lock_guard<std::mutex> lock(mu_);
  engine_waiting_ = s.waiting;
  snapshot_ = std::move(s);
}

EngineSnapshot EngineService::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

void EngineService::loop() {
  for (;;) {
    bool stopping = false, heartbeat = false;
    if (!engine_->has_unfinished()) {  // idle: sleep until the inbox has something
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] { return stop_ || !submits_.empty() || !finishes_.empty() || !holds_.empty(); };
      if (options_.heartbeat_ms > 0) heartbeat = !work_.wait_for(lock, std::chrono::milliseconds(options_.heartbeat_ms), ready);
      else work_.wait(lock, ready);
      stopping = stop_;
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stop_;
    }
    drain_inbox();
    if (stopping) return;
    if (heartbeat) {
      const Status st = engine_->heartbeat();
      if (!st.ok()) log_error("heartbeat: " + st.message());
      continue;
    }
    if (!engine_->has_unfinished()) {
      publish_snapshot();
      continue;
    }
    std::vector<RequestOutput> outputs = engine_->step();
    // The snapshot first: a client that has its last token sees /metrics
    // as of that step (nothing of it still running).
    publish_snapshot();
    for (RequestOutput& o : outputs) {
      int64_t id = -1;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = service_ids_.find(o.id);
        if (it == service_ids_.end()) continue;  // finished by its handler meanwhile
        id = it->second;
      }
      deliver(id, std::move(o));
    }
  }
}

void EngineService::shutdown(int grace_ms) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    accepting_ = false;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (routes_.empty() || std::chrono::steady_clock::now() >= deadline) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<int64_t> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, route] : routes_) left.push_back(id);
  }
  if (!left.empty()) log_info("shutdown: cancelling " + std::to_string(left.size()) + " requests still in flight");
  for (int64_t id : left) finish(id, FinishReason::kAbort);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace dsv4
