// dsv4 bench --soak: a mixed load against a running server for a chosen
// time. Clients send short and long prompts, streaming and not, chat and
// completions, several choices, prompts sharing long prefixes (prefix-cache
// hits) and streams they abandon after the first chunk (aborts); the server
// decides whether it speculates. Reports every error (a refused valid
// request, a broken stream, a request that never ended: "lost"), latency
// and time-to-first-token percentiles, and whether page accounting returns
// to its baseline (nothing running, every cache family at 0) once the load
// stops. Exit 0 only with zero errors, zero lost requests and the baseline.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "http/http_client.h"

namespace dsv4::app {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Tally {
  std::mutex mu;
  int64_t sent = 0, completed = 0, aborted = 0, errors = 0, lost = 0;
  std::vector<double> latency, ttft;
  std::vector<std::string> first_errors;  // a few, for the report

  void error(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    ++errors;
    if (first_errors.size() < 5) first_errors.push_back(what);
  }
};

// Values of a metric line `name{...} value` / `name value`.
std::vector<double> metric(const std::string& text, const std::string& name) {
  std::vector<double> out;
  const std::regex re("^" + name + R"((\{[^}]*\})? (\S+)$)", std::regex::multiline);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back(std::stod((*it)[2]));
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

std::string text_of(std::mt19937_64& rng, size_t n) {
  static const char kWords[][8] = {"the", "model", "cache", "token", "page", "rank", "step", "block", "draft", "serve"};
  std::string s;
  while (s.size() < n) s += std::string(kWords[rng() % 10]) + " ";
  s.resize(n);
  return s;
}

// One request of a random kind; records its outcome.
void one_request(const std::string& host, int port, std::mt19937_64& rng, const std::vector<std::string>& prefixes,
                 Tally* t) {
  HttpClient cli(host, port);
  cli.set_read_timeout_ms(300000);
  const int kind = static_cast<int>(rng() % 6);
  const bool chat = kind == 3;
  const bool stream = kind == 1 || kind == 4 || (kind == 2 && rng() % 2);
  const bool abort_early = kind == 4;
  std::string prompt;
  if (kind == 0 || kind == 3) prompt = text_of(rng, 5 + rng() % 60);           // short
  else if (kind == 1) prompt = text_of(rng, 500 + rng() % 1500);                // long
  else prompt = prefixes[rng() % prefixes.size()] + text_of(rng, 10 + rng() % 50);  // shared prefix
  // ignore_eos: the load is the lengths drawn, whatever the model would say.
  json body = {{"max_tokens", 1 + static_cast<int>(rng() % 24)}, {"temperature", rng() % 2 ? 0.0 : 0.8},
               {"seed", static_cast<int>(rng() % 1000)}, {"stream", stream}, {"ignore_eos", true}};
  if (rng() % 5 == 0) body["n"] = 2;
  if (chat) body["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
  else body["prompt"] = prompt;
  const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
  {
    std::lock_guard<std::mutex> lock(t->mu);
    ++t->sent;
  }
  const auto t0 = Clock::now();
  if (!stream) {
    auto r = cli.post(path, body.dump(), "application/json");
    if (!r) return t->error("no answer to " + path);
    if (r->status != 200) return t->error("HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 200));
    const json j = json::parse(r->body, nullptr, false);
    if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) return t->error("malformed answer");
    for (const json& c : j["choices"])
      if (c["finish_reason"].is_null()) {
        std::lock_guard<std::mutex> lock(t->mu);
        ++t->lost;
      }
    std::lock_guard<std::mutex> lock(t->mu);
    ++t->completed;
    t->latency.push_back(since(t0));
    return;
  }
  std::string buffer;
  double first = -1;
  bool done = false;
  int finishes = 0;
  auto on_body = [&](std::string_view piece) {
    if (first < 0) first = since(t0);
    buffer.append(piece);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
      const std::string event = buffer.substr(0, end);
      if (event == "data: [DONE]") {
        done = true;
        continue;
      }
      const json j = json::parse(event.substr(std::min<size_t>(6, event.size())), nullptr, false);
      if (j.is_discarded()) return false;
      for (const json& c : j.value("choices", json::array())) finishes += !c["finish_reason"].is_null();
    }
    return !abort_early;  // an abandoned stream: the client goes away
  };
  auto r = cli.send("POST", path, body.dump(), {{"Content-Type", "application/json"}}, on_body);
  std::lock_guard<std::mutex> lock(t->mu);
  if (abort_early) {
    ++t->aborted;
    return;
  }
  if (!r || r->status != 200) {
    ++t->errors;
    if (t->first_errors.size() < 5) t->first_errors.push_back("stream to " + path + " broke");
    return;
  }
  if (!done || finishes < (body.contains("n") ? 2 : 1)) ++t->lost;
  ++t->completed;
  t->latency.push_back(since(t0));
  if (first >= 0) t->ttft.push_back(first);
}

// Waits until nothing runs and no cache family holds a request page.
bool settles(const std::string& host, int port, double timeout_s) {
  HttpClient cli(host, port);
  const auto t0 = Clock::now();
  while (since(t0) < timeout_s) {
    auto r = cli.get("/metrics");
    if (r && r->status == 200) {
      const auto usage = metric(r->body, "dsv4_kv_cache_usage");
      const auto running = metric(r->body, "dsv4_num_requests_running");
      const auto waiting = metric(r->body, "dsv4_num_requests_waiting");
      bool empty = !usage.empty();
      for (double u : usage) empty &= u == 0.0;
      if (empty && running == std::vector<double>{0} && waiting == std::vector<double>{0}) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

double metric_total(const std::string& host, int port, const std::string& name) {
  HttpClient cli(host, port);
  auto r = cli.get("/metrics");
  if (!r) return 0;
  const auto v = metric(r->body, name);
  return v.empty() ? 0 : v[0];
}

}  // namespace

int bench_soak(const std::string& host, int port, double duration_s, int clients, uint64_t seed) {
  std::printf("dsv4 bench --soak: %d clients against http://%s:%d for %.0f s\n", clients, host.c_str(), port, duration_s);
  std::mt19937_64 rng(seed);
  std::vector<std::string> prefixes;
  // Several 128-token cache blocks each, whatever the tokenizer.
  for (int i = 0; i < 4; ++i) prefixes.push_back(text_of(rng, 2000));
  const double hits0 = metric_total(host, port, "dsv4_prefix_cache_hits_total");
  const double drafts0 = metric_total(host, port, "dsv4_spec_decode_num_draft_tokens_total");
  const double accepted0 = metric_total(host, port, "dsv4_spec_decode_num_accepted_tokens_total");
  Tally t;
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      std::mt19937_64 mine(seed * 1000003 + c);
      while (since(t0) < duration_s) one_request(host, port, mine, prefixes, &t);
    });
  for (auto& th : threads) th.join();
  const double wall = since(t0);
  const bool baseline = settles(host, port, 60);
  const double hits = metric_total(host, port, "dsv4_prefix_cache_hits_total") - hits0;
  const double drafts = metric_total(host, port, "dsv4_spec_decode_num_draft_tokens_total") - drafts0;
  const double accepted = metric_total(host, port, "dsv4_spec_decode_num_accepted_tokens_total") - accepted0;

  std::printf("requests: %lld sent, %lld completed, %lld aborted by the client (%.1f completed/s)\n",
              static_cast<long long>(t.sent), static_cast<long long>(t.completed), static_cast<long long>(t.aborted),
              t.completed / wall);
  std::printf("errors: %lld, lost requests: %lld\n", static_cast<long long>(t.errors), static_cast<long long>(t.lost));
  for (const std::string& e : t.first_errors) std::printf("  error: %s\n", e.c_str());
  std::printf("latency s: p50 %.3f p90 %.3f p99 %.3f max %.3f; time to first token s: p50 %.3f p90 %.3f p99 %.3f\n",
              percentile(t.latency, 0.5), percentile(t.latency, 0.9), percentile(t.latency, 0.99),
              percentile(t.latency, 1.0), percentile(t.ttft, 0.5), percentile(t.ttft, 0.9), percentile(t.ttft, 0.99));
  std::printf("prefix cache: %.0f prompt tokens hit; speculation: %.0f of %.0f draft tokens accepted\n", hits, accepted,
              drafts);
  std::printf("page accounting: %s\n", baseline ? "at baseline (nothing running, no request page held)"
                                                 : "NOT at baseline 60 s after the load");
  const bool ok = t.errors == 0 && t.lost == 0 && baseline && t.completed > 0;
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace dsv4::app
