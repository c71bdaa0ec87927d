// The engine behind the HTTP server, as vLLM's engine core runs it: one
// thread owns the engine and steps it; handler threads never touch it.
// They post submits and aborts to an inbox the loop drains between steps,
// receive their tokens through a channel, and read the metrics snapshot the
// loop publishes after each step. So a submit, an abort or /metrics answers
// in microseconds however long a step takes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
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

// The events of one HTTP request's engine requests (its choices). The
// engine thread pushes; the reader pops, waiting or (with a listener) told
// of each push so that it never has to wait.
class EventChannel {
 public:
  // on_push runs after each push, on the pushing thread, under the
  // channel's lock: it must only hand the news on (post, notify).
  explicit EventChannel(std::function<void()> on_push = nullptr) : on_push_(std::move(on_push)) {}
  void push(ChoiceEvent e);
  // Waits up to timeout_ms (0: not at all); false when there is nothing.
  bool pop(ChoiceEvent* e, int timeout_ms);
  // No listener from now on (its reader is going away).
  void clear_listener();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChoiceEvent> events_;
  std::function<void()> on_push_;
};

struct EngineServiceOptions {
  // Choices waiting for the engine (queued or admitted but not yet
  // scheduled) beyond this are refused with a retry hint. A request's
  // choices are admitted as one unit, and always into an empty queue.
  int64_t max_queue = 256;
  // When idle this long, reach every rank once (0: never); a lost rank then
  // shows before the next request.
  int heartbeat_ms = 0;
};

struct EngineSnapshot {
  int64_t running = 0, waiting = 0;
  EngineStats stats;
  std::vector<std::pair<std::string, double>> cache_usage;  // family -> fraction of pages requests hold
  int64_t prefix_cache_blocks = 0;                            // over every data-parallel group
  int64_t held = 0;                                           // requests held for their clients
};

// One engine request: a prompt and how to sample it.
struct ChoiceRequest {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

class EngineService {
 public:
  EngineService(std::unique_ptr<Engine> engine, const EngineServiceOptions& options);
  ~EngineService();

  // Queues a request's choices as one unit (all or none); choice i reports
  // to `channel` tagged i. Returns their ids. Errors: invalid parameters or
  // prompt (kInvalidArgument); the queue is too full now to take them
  // (kResourceExhausted: retry later); shutting down (kOutOfRange).
  StatusOr<std::vector<int64_t>> submit(std::vector<ChoiceRequest> choices, std::shared_ptr<EventChannel> channel);
  // Ends a request (client gone: kAbort; stop string seen: kStop) at the
  // next step boundary; its channel gets a finished event.
  void finish(int64_t id, FinishReason reason);
  // Holds a request's generation while its client is behind (held: it
  // keeps its pages and takes no step, nor a place among max_num_seqs), or
  // lets it go on; from the next step boundary.
  void hold(int64_t id, bool held);
  // Refuses new requests, lets running ones finish for up to grace_ms, then
  // aborts what is left and stops the engine thread.
  void shutdown(int grace_ms);
  bool accepting() const;

  // As of the end of the last step.
  EngineSnapshot snapshot() const;
  // Every rank answers; safe to call while a step runs (no lock).
  bool healthy() const { return engine_->healthy(); }
  const ModelConfig& config() const { return engine_->config(); }
  int64_t max_model_len() const { return engine_->scheduler().options().max_model_len; }

 private:
  struct Route {
    std::shared_ptr<EventChannel> channel;
    int choice;
  };
  struct Pending {
    int64_t id;
    ChoiceRequest request;
  };
  void loop();
  // On the loop thread, between steps: submits into the engine, aborts.
  void drain_inbox();
  void publish_snapshot();
  // The engine's id of a service request (-1 when not in the engine).
  int64_t engine_id(int64_t id) const;
  // To the request's channel (as service id `id`); a finished one is forgotten.
  void deliver(int64_t id, RequestOutput o);

  std::unique_ptr<Engine> engine_;
  EngineServiceOptions options_;

  mutable std::mutex mu_;  // guards what follows; never held across a step
  std::condition_variable work_;
  std::vector<Pending> submits_;
  std::vector<std::pair<int64_t, FinishReason>> finishes_;
  std::vector<std::pair<int64_t, bool>> holds_;
  std::set<int64_t> held_;  // service ids paused for their clients (the loop's own: no lock)
  std::map<int64_t, Route> routes_;           // every live request, queued or in the engine
  std::map<int64_t, int64_t> engine_ids_;     // service id -> engine id, once in the engine
  std::map<int64_t, int64_t> service_ids_;    // and back
  int64_t engine_waiting_ = 0;                // the engine's waiting requests after the last step
  int64_t next_id_ = 1;
  bool accepting_ = true, stop_ = false;
  EngineSnapshot snapshot_;
  std::chrono::steady_clock::time_point usage_time_;  // when the cache usage was last computed (loop thread)

  std::thread thread_;
};

}  // namespace dsv4
