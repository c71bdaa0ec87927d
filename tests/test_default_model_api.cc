// What the embedded default model learned, asked as a user asks: held-out
// requests (phrasings, story problems and cities its training never saw,
// tests/golden_default/heldout.jsonl written by train/evaluate.py) through
// dsv4 serve's /v1/chat/completions, greedy. Arithmetic with thinking off
// and on, tool calls that parse into tool_calls with the right arguments,
// and the answer after the tool's result.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "http/http_client.h"
#include "server_process.h"

namespace dsv4 {
namespace {

using json = nlohmann::ordered_json;  // keys in the order a client sends them (they are rendered into the prompt)
using testing::ServerProcess;

const std::vector<std::string> kServe = {"--kv-cache-memory", "256M", "--max-num-seqs", "16"};

std::vector<json> heldout_cases() {
  std::ifstream in(std::string(DSV4_DEFAULT_MODEL_GOLDEN_DIR) + "/heldout.jsonl");
  std::vector<json> cases;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) cases.push_back(json::parse(line));
  return cases;
}

json request(const json& c) {
  json body = {{"messages", json::array()}, {"temperature", 0}, {"max_tokens", 400},
               {"chat_template_kwargs", {{"enable_thinking", c["thinking"]}}}};
  if (c["kind"] == "tool") {
    if (!c["system"].get<std::string>().empty()) body["messages"].push_back({{"role", "system"}, {"content", c["system"]}});
    body["tools"] = c["tools"];
  }
  for (const json& m : c["messages"]) body["messages"].push_back(m);
  return body;
}

// The reply's last integer (a sign kept), as a reader takes the answer.
std::optional<long> last_integer(const std::string& text) {
  static const std::regex integer(R"(-?\d+)");
  std::optional<long> last;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), integer); it != std::sregex_iterator(); ++it)
    last = std::stol(it->str());
  return last;
}

json chat(HttpClient& cli, const json& body) {
  auto r = cli.post("/v1/chat/completions", body.dump());
  if (!r || r->status != 200) return json();
  return json::parse(r->body)["choices"][0]["message"];
}

// A reply's text field ("" when absent or null, as content is beside tool calls).
std::string text(const json& reply, const char* key) {
  return reply.is_object() && reply.contains(key) && reply[key].is_string() ? reply[key].get<std::string>() : "";
}

struct Tally {
  int right = 0, total = 0;
  std::vector<std::string> failures;
  void add(bool ok, const std::string& what) {
    ++total;
    right += ok;
    if (!ok && failures.size() < 3) failures.push_back(what);
  }
  double rate() const { return total ? static_cast<double>(right) / total : 0.0; }
};

TEST(DefaultModelApi, AnswersHeldOutArithmeticAndToolRequests) {
  const std::vector<json> cases = heldout_cases();
  ASSERT_GE(cases.size(), 600u) << "200 arithmetic questions in each mode and 200 tool requests";
  ServerProcess server(kServe);
  ASSERT_GT(server.port(), 0) << server.log();
  std::map<std::string, Tally> tallies;
  std::mutex mu;
  std::atomic<size_t> next{0};
  auto worker = [&] {
    HttpClient cli("127.0.0.1", server.port());
    cli.set_read_timeout_ms(600000);
    for (size_t i; (i = next.fetch_add(1)) < cases.size();) {
      const json& c = cases[i];
      const json reply = chat(cli, request(c));
      if (c["kind"] == "arithmetic") {
        const std::string content = text(reply, "content");
        const bool ok = last_integer(content) == c["answer"].get<long>();
        std::lock_guard lock(mu);
        tallies[c["thinking"] ? "arithmetic, thinking on" : "arithmetic, thinking off"].add(
            ok, c["messages"][0]["content"].get<std::string>() + " -> " + content);
        continue;
      }
      const json calls = reply.is_object() && reply.contains("tool_calls") ? reply["tool_calls"] : json::array();
      bool picked = false, called = false, answered = false;
      std::string answer;
      if (!calls.empty()) {
        const json& fn = calls[0]["function"];
        const json args = json::parse(fn["arguments"].get<std::string>(), nullptr, false);
        picked = fn["name"] == c["name"] && args.is_object();
        called = picked && args == c["arguments"];
        json body = request(c);
        body["messages"].push_back({{"role", "assistant"}, {"content", text(reply, "content")}, {"tool_calls", calls}});
        body["messages"].push_back({{"role", "tool"}, {"tool_call_id", calls[0]["id"]}, {"content", c["result"]}});
        const json after = chat(cli, body);
        answer = text(after, "content");
        const std::string value = c["value"].is_string() ? c["value"].get<std::string>() : c["value"].dump();
        answered = answer.find(value) != std::string::npos;
      }
      std::lock_guard lock(mu);
      tallies["tool call of the right tool"].add(picked, c["messages"][0]["content"].get<std::string>() + " -> " +
                                                             (calls.empty() ? reply.dump() : calls.dump()));
      tallies["tool call with the right arguments"].add(called, c["messages"][0]["content"].get<std::string>() +
                                                                    " -> " + (calls.empty() ? reply.dump() : calls.dump()));
      tallies["answer from the tool's result"].add(answered, c["result"].get<std::string>() + " -> " + answer);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  // What the committed model measured when it was trained (train/README.md),
  // a few points under: a tokenizer, chat encoding, tool-call parser or
  // forward that serves it wrong falls below. The goal is 95% in every row
  // (issue 34); the arithmetic is far from it yet.
  const std::map<std::string, double> floors = {
      {"arithmetic, thinking off", 0.01},         {"arithmetic, thinking on", 0.005},
      {"tool call of the right tool", 0.88},      {"tool call with the right arguments", 0.18},
      {"answer from the tool's result", 0.93},
  };
  ASSERT_EQ(tallies.size(), floors.size()) << server.log();
  for (const auto& [name, t] : tallies) {
    std::printf("%s: %d/%d = %.1f%%\n", name.c_str(), t.right, t.total, 100.0 * t.rate());
    std::string failures;
    for (const std::string& f : t.failures) failures += "\n  " + f;
    EXPECT_GE(t.rate(), floors.at(name)) << name << ": " << t.right << "/" << t.total << failures;
  }
  EXPECT_EQ(server.stop(), 0) << server.log();
}

struct Speculation {
  double acceptance = 0;       // accepted / drafted
  double accepted_length = 0;  // tokens per verifying step: 1 + accepted / steps
};

// Greedy replies to the held-out arithmetic questions (both modes) from a
// server speculating as `config` says, and its drafts' fate (/metrics).
Speculation speculate(const std::string& model, const std::string& config, const std::vector<json>& cases) {
  std::vector<std::string> args = kServe;
  for (const std::string& a : {"--model", model.c_str(), "--speculative-config", config.c_str()}) args.push_back(a);
  ServerProcess server(args);
  EXPECT_GT(server.port(), 0) << server.log();
  HttpClient cli("127.0.0.1", server.port());
  cli.set_read_timeout_ms(600000);
  int asked = 0;
  for (const json& c : cases) {
    if (c["kind"] != "arithmetic" || asked++ >= 60) continue;
    EXPECT_TRUE(chat(cli, request(c)).is_object()) << server.log();
  }
  auto metrics = cli.get("/metrics");
  EXPECT_TRUE(metrics);
  if (!metrics) return {};
  auto value = [&](const char* name) {
    const std::vector<double> v = testing::metric(metrics->body, name);
    return v.empty() ? 0.0 : v[0];
  };
  const double drafted = value("dsv4_spec_decode_num_draft_tokens_total");
  const double accepted = value("dsv4_spec_decode_num_accepted_tokens_total");
  const double steps = value("dsv4_spec_decode_num_drafts_total");
  EXPECT_GT(drafted, 0) << server.log();
  EXPECT_EQ(server.stop(), 0) << server.log();
  return {drafted > 0 ? accepted / drafted : 0.0, steps > 0 ? 1.0 + accepted / steps : 0.0};
}

// The trained drafters on held-out prompts, greedy: the MTP block's single
// draft is kept at least 70% of the time.
TEST(DefaultModelApi, TrainedDraftersAreMostlyAccepted) {
  const std::vector<json> cases = heldout_cases();
  const Speculation mtp1 = speculate("embedded:default", R"({"method":"mtp","num_speculative_tokens":1})", cases);
  const Speculation mtp3 = speculate("embedded:default", R"({"method":"mtp","num_speculative_tokens":3})", cases);
  const Speculation dspark5 =
      speculate("embedded:default-dspark", R"({"method":"dspark","num_speculative_tokens":5})", cases);
  std::printf("MTP K=1: %.1f%% of drafts accepted; mean accepted length MTP K=3 %.2f, DSpark K=5 %.2f\n",
              100.0 * mtp1.acceptance, mtp3.accepted_length, dspark5.accepted_length);
  EXPECT_GE(mtp1.acceptance, 0.70);
  EXPECT_GT(mtp3.accepted_length, 2.0);
  // The DSpark drafter's runs are kept in part (a random drafter's are not);
  // trained for 80 steps it does not yet reach the MTP block's K = 3
  // (issue 34's goal).
  EXPECT_GT(dspark5.accepted_length, 1.3);
}

// The README's first command's server, asked the README's question: a
// readable reply in the form it learned ("17 + 25 = N."), its reasoning
// apart in thinking mode. (That N is 42 is issue 34's goal; the committed
// model's sums are mostly wrong.)
TEST(DefaultModelApi, AnswersTheReadmesQuestionReadably) {
  ServerProcess server(kServe);
  ASSERT_GT(server.port(), 0) << server.log();
  HttpClient cli("127.0.0.1", server.port());
  for (bool thinking : {false, true}) {
    const json reply = chat(cli, {{"messages", {{{"role", "user"}, {"content", "What is 17 + 25?"}}}},
                                  {"temperature", 0}, {"max_tokens", 200},
                                  {"chat_template_kwargs", {{"enable_thinking", thinking}}}});
    ASSERT_TRUE(reply.is_object()) << server.log();
    EXPECT_TRUE(std::regex_match(text(reply, "content"), std::regex(R"(17 \+ 25 = -?\d+\.)"))) << reply.dump();
    if (thinking) {
      EXPECT_NE(text(reply, "reasoning_content").find("17 + 25"), std::string::npos) << reply.dump();
    }
  }
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
}  // namespace dsv4
