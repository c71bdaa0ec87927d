#include "server/engine_service.h"

#include <chrono>

#include "base/logging.h"

namespace dsv4 {

void EventChannel::push(ChoiceEvent e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_one();
}

bool EventChannel::pop(ChoiceEvent* e, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !events_.empty(); })) return false;
  *e = std::move(events_.front());
  events_.pop_front();
  return true;
}

EngineService::EngineService(std::unique_ptr<Engine> engine, const EngineServiceOptions& options)
    : engine_(std::move(engine)), options_(options), thread_([this] { loop(); }) {}

EngineService::~EngineService() { shutdown(0); }

StatusOr<int64_t> EngineService::submit(std::vector<int32_t> prompt, const SamplingParams& params,
                                        std::shared_ptr<EventChannel> channel, int choice) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return out_of_range("the server is shutting down");
  if (engine_->scheduler().num_waiting() >= options_.max_queue)
    return resource_exhausted("the server is overloaded: " + std::to_string(options_.max_queue) +
                              " requests are already waiting");
  DSV4_ASSIGN_OR_RETURN(int64_t id, engine_->add_request(std::move(prompt), params));
  routes_[id] = {std::move(channel), choice};
  work_.notify_one();
  return id;
}

void EngineService::finish(int64_t id, FinishReason reason) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = routes_.find(id);
  if (it == routes_.end()) return;  // already done
  engine_->finish(id, reason);
  ChoiceEvent e;
  e.choice = it->second.choice;
  e.output.id = id;
  e.output.finished = true;
  e.output.finish_reason = reason;
  it->second.channel->push(std::move(e));
  routes_.erase(it);
}

void EngineService::loop() {
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] { return stop_ || engine_->has_unfinished(); };
    if (options_.heartbeat_ms > 0) {
      if (!work_.wait_for(lock, std::chrono::milliseconds(options_.heartbeat_ms), ready)) {
        const Status st = engine_->heartbeat();
        if (!st.ok()) log_error("heartbeat: " + st.message());
        continue;
      }
    } else {
      work_.wait(lock, ready);
    }
    if (stop_) return;
    for (RequestOutput& o : engine_->step()) {
      auto it = routes_.find(o.id);
      if (it == routes_.end()) continue;
      const bool done = o.finished;
      it->second.channel->push({it->second.choice, std::move(o)});
      if (done) routes_.erase(it);
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

EngineSnapshot EngineService::snapshot() {
  std::lock_guard<std::mutex> lock(mu_);
  EngineSnapshot s;
  s.running = engine_->scheduler().num_running();
  s.waiting = engine_->scheduler().num_waiting();
  s.stats = engine_->stats();
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
  return s;
}

}  // namespace dsv4
