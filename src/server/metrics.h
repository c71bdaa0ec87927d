// Prometheus metrics of the server: requests by outcome, tokens, latency
// histograms, and (from an engine snapshot) queue, cache and preemptions.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "http/http_listener.h"
#include "server/engine_service.h"

namespace dsv4 {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  void render(const std::string& name, const std::string& help, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;
  double sum_ = 0;
  int64_t count_ = 0;
};

class Metrics {
 public:
  // outcome: stop, length, tool_calls, abort, error (4xx/5xx before running).
  void count_request(const std::string& endpoint, const std::string& outcome);
  void add_tokens(int64_t prompt, int64_t generated);
  void observe_ttft(double seconds);
  void observe_time_per_output_token(double seconds);
  std::string render(const EngineSnapshot& engine) const;
  // The front end's connection counters, and the process's resident
  // memory and descriptors (Prometheus' process_* names), in the same format.
  static std::string render_http(const HttpStats& http);

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> requests_;
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  Histogram ttft_{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram tpot_{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
};

}  // namespace dsv4
