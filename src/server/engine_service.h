// The engine behind the HTTP server: one thread steps the engine; handler
// threads submit requests, receive their tokens through a channel, and
// abort or stop them. Requests beyond max_queue waiting ones are refused
// (the server answers 503).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"
#include "runtime/engine.h"

namespace dsv4 {

// What a request produced in one engine step, for one of its choices.
struct ChoiceEvent {
  int choice = 0;
  RequestOutput output;
};

// The events of one HTTP request's engine requests (its choices).
class EventChannel {
 public:
  void push(ChoiceEvent e);
  // Waits up to timeout_ms; false on timeout.
  bool pop(ChoiceEvent* e, int timeout_ms);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChoiceEvent> events_;
};

struct EngineServiceOptions {
  int64_t max_queue = 256;  // waiting requests beyond this are refused
  // When idle this long, reach every rank once (0: never); a lost rank then
  // shows before the next request.
  int heartbeat_ms = 0;
};

struct EngineSnapshot {
  int64_t running = 0, waiting = 0;
  EngineStats stats;
  std::vector<std::pair<std::string, double>> cache_usage;  // family -> fraction of pages requests hold
  int64_t prefix_cache_blocks = 0;                            // over every data-parallel group
};

class EngineService {
 public:
  EngineService(std::unique_ptr<Engine> engine, const EngineServiceOptions& options);
  ~EngineService();

  // Queues a request whose events go to `channel` tagged `choice`. Errors:
  // invalid parameters or prompt (kInvalidArgument), the queue is full
  // (kResourceExhausted), shutting down (kOutOfRange).
  StatusOr<int64_t> submit(std::vector<int32_t> prompt, const SamplingParams& params,
                           std::shared_ptr<EventChannel> channel, int choice);
  // Ends a request now (client gone: kAbort; stop string seen: kStop).
  void finish(int64_t id, FinishReason reason);
  // Refuses new requests, lets running ones finish for up to grace_ms, then
  // aborts what is left and stops the engine thread.
  void shutdown(int grace_ms);

  EngineSnapshot snapshot();
  // Every rank answers; safe to call while a step runs (no lock).
  bool healthy() const { return engine_->healthy(); }
  const ModelConfig& config() const { return engine_->config(); }
  const Engine& engine() const { return *engine_; }
  int64_t max_model_len() const { return engine_->scheduler().options().max_model_len; }

 private:
  void loop();

  std::unique_ptr<Engine> engine_;
  EngineServiceOptions options_;
  std::mutex mu_;
  std::condition_variable work_;
  struct Route {
    std::shared_ptr<EventChannel> channel;
    int choice;
  };
  std::map<int64_t, Route> routes_;
  bool accepting_ = true, stop_ = false;
  std::thread thread_;
};

}  // namespace dsv4
