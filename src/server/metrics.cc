#include "server/metrics.h"

#include "base/process_memory.h"

#include <cstdio>
#include <filesystem>
#include <tuple>

namespace dsv4 {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void header(const std::string& name, const std::string& type, const std::string& help, std::string* out) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

// A metric with one unlabelled value.
void scalar(const std::string& name, const std::string& type, const std::string& help, int64_t value, std::string* out) {
  header(name, type, help, out);
  *out += name + " " + std::to_string(value) + "\n";
}

}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& help, std::string* out) const {
  header(name, "histogram", help, out);
  int64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    *out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  *out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  *out += name + "_sum " + num(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

void Metrics::count_request(const std::string& endpoint, const std::string& outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, outcome}];
}

void Metrics::add_tokens(int64_t prompt, int64_t generated) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
}

void Metrics::observe_ttft(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.observe(s);
}

void Metrics::observe_time_per_output_token(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  tpot_.observe(s);
}

std::string Metrics::render(const EngineSnapshot& e) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  header("dsv4_requests_total", "counter", "Finished HTTP generation requests by endpoint and outcome.", &out);
  for (const auto& [key, n] : requests_)
    out += "dsv4_requests_total{endpoint=\"" + key.first + "\",outcome=\"" + key.second + "\"} " + std::to_string(n) + "\n";
  scalar("dsv4_prompt_tokens_total", "counter", "Prompt tokens of finished requests.", prompt_tokens_, &out);
  scalar("dsv4_generation_tokens_total", "counter", "Generated tokens of finished requests.", generated_tokens_, &out);
  ttft_.render("dsv4_time_to_first_token_seconds", "Time from arrival to the first generated token.", &out);
  tpot_.render("dsv4_time_per_output_token_seconds", "Time between consecutive generated tokens.", &out);
  scalar("dsv4_num_requests_running", "gauge", "Requests the scheduler is running.", e.running, &out);
  scalar("dsv4_num_requests_waiting", "gauge", "Requests waiting for admission.", e.waiting, &out);
  scalar("dsv4_num_requests_held", "gauge",
         "Streamed requests held because their client is behind (no steps; pages kept until it catches up or is cut off).",
         e.held, &out);
  header("dsv4_kv_cache_usage", "gauge", "Fraction of each cache family's pages requests hold.", &out);
  for (const auto& [family, used] : e.cache_usage)
    out += "dsv4_kv_cache_usage{family=\"" + family + "\"} " + num(used) + "\n";
  header("dsv4_dp_group_requests_total", "counter", "Requests assigned to each data-parallel group.", &out);
  for (size_t g = 0; g < e.stats.requests_per_group.size(); ++g)
    out += "dsv4_dp_group_requests_total{group=\"" + std::to_string(g) + "\"} " +
           std::to_string(e.stats.requests_per_group[g]) + "\n";
  scalar("dsv4_num_preemptions_total", "counter", "Requests preempted (recomputed later).", e.stats.preemptions, &out);
  scalar("dsv4_engine_steps_total", "counter", "Engine steps run.", e.stats.steps, &out);
  scalar("dsv4_spec_decode_num_draft_tokens_total", "counter", "Draft tokens the drafter proposed and the model verified.", e.stats.drafts_proposed, &out);
  scalar("dsv4_spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.", e.stats.drafts_accepted, &out);
  scalar("dsv4_spec_decode_num_drafts_total", "counter", "Decode steps of a request that verified drafts.", e.stats.verify_chunks, &out);
  // Per draft position (as vLLM's spec_decode_num_accepted_tokens_per_pos):
  // accepted / draft tokens at position k is how often a run gets past it.
  for (const auto& [name, help, counts] :
       {std::tuple{"dsv4_spec_decode_num_draft_tokens_per_pos", "Draft tokens proposed at each position of a run.",
                   &e.stats.proposed_at},
        std::tuple{"dsv4_spec_decode_num_accepted_tokens_per_pos",
                   "Draft tokens accepted at each position of a run (with every draft before them).",
                   &e.stats.accepted_at}}) {
    header(name, "counter", help, &out);
    for (size_t k = 0; k < counts->size() && e.stats.proposed_at[k] > 0; ++k)
      out += std::string(name) + "{position=\"" + std::to_string(k) + "\"} " + std::to_string((*counts)[k]) + "\n";
  }
  scalar("dsv4_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", e.stats.prefix_queried_tokens, &out);
  scalar("dsv4_prefix_cache_hits_total", "counter", "Prompt tokens served from the prefix cache.", e.stats.prefix_hit_tokens, &out);
  scalar("dsv4_prefix_cache_blocks", "gauge", "128-token blocks the prefix cache keeps.", e.prefix_cache_blocks, &out);
  return out;
}

std::string Metrics::render_http(const HttpStats& h) {
  std::string out;
  scalar("dsv4_http_connections_open", "gauge", "Open client connections.", h.open, &out);
  scalar("dsv4_http_connections_total", "counter", "Client connections accepted.", h.accepted, &out);
  scalar("dsv4_http_connections_refused_total", "counter",
         "Connections past the cap (--max-connections): only /health answered, or closed at once.", h.refused, &out);
  scalar("dsv4_http_requests_read_total", "counter", "HTTP requests read.", h.requests, &out);
  scalar("dsv4_http_malformed_requests_total", "counter", "Requests refused unread: malformed, head or body too large.",
         h.malformed, &out);
  header("dsv4_http_connections_closed_total", "counter",
         "Connections the server closed: idle past the keep-alive timeout, a request head or body too slow, a reader "
         "that took nothing for the write timeout.",
         &out);
  for (const auto& [why, n] : {std::pair<const char*, int64_t>{"idle", h.idle_closed},
                               {"head_timeout", h.head_timeouts},
                               {"body_timeout", h.body_timeouts},
                               {"write_timeout", h.write_timeouts}})
    out += std::string("dsv4_http_connections_closed_total{reason=\"") + why + "\"} " + std::to_string(n) + "\n";
  scalar("dsv4_http_slow_readers_cut_total", "counter",
         "Streams cut off because their reader fell behind (backlog cap or write timeout); their requests aborted.",
         h.slow_readers_cut, &out);
  scalar("dsv4_http_clients_gone_total", "counter", "Requests whose client left before the response was complete.",
         h.clients_gone, &out);
  scalar("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", process_memory().resident, &out);
  int64_t fds = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    ++fds;
  scalar("process_open_fds", "gauge", "Number of open file descriptors.", fds, &out);
  return out;
}

}  // namespace dsv4
