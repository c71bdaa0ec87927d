// Sampling parameters, the sampler, the incremental detokenizer, and the
// engine's handling of bad requests.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "sched/sampling_params.h"
#include "test_util.h"
#include "tokenizer/byte_tokenizer.h"
#include "tokenizer/incremental_detokenizer.h"

namespace dsv4 {
namespace {

using testing::greedy;
using testing::golden_model;

void expect_invalid(const SamplingParams& p, const std::string& words) {
  const Status s = p.validate(100);
  ASSERT_FALSE(s.ok()) << words;
  EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
}

TEST(SamplingParams, OutOfRangeValuesAreRejectedByName) {
  SamplingParams p;
  EXPECT_TRUE(p.validate(100).ok());
  auto with = [](auto set) {
    SamplingParams q;
    set(q);
    return q;
  };
  expect_invalid(with([](SamplingParams& q) { q.max_tokens = -1; }), "max_tokens must be at least 1");
  expect_invalid(with([](SamplingParams& q) { q.top_p = 0.0f; }), "top_p must be in (0, 1]");
  expect_invalid(with([](SamplingParams& q) { q.top_p = 1.5f; }), "top_p must be in (0, 1]");
  expect_invalid(with([](SamplingParams& q) { q.temperature = -0.5f; }), "temperature");
  expect_invalid(with([](SamplingParams& q) { q.top_k = -3; }), "top_k");
  expect_invalid(with([](SamplingParams& q) { q.min_p = 1.5f; }), "min_p");
  expect_invalid(with([](SamplingParams& q) { q.repetition_penalty = 0.0f; }), "repetition_penalty");
  expect_invalid(with([](SamplingParams& q) { q.presence_penalty = 3.0f; }), "presence_penalty");
  expect_invalid(with([](SamplingParams& q) { q.logprobs = 21; }), "logprobs");
  expect_invalid(with([](SamplingParams& q) { q.stop_token_ids = {100}; }), "stop_token_ids");
  expect_invalid(with([](SamplingParams& q) { q.stop = {""}; }), "stop strings must not be empty");
}

TEST(SamplingParams, FromJsonReadsOpenAiFieldsAndNamesBadTypes) {
  auto p = SamplingParams::from_json(nlohmann::json::parse(
      R"({"temperature": 0.5, "top_p": 0.9, "max_tokens": 7, "seed": 3, "stop": "END", "logprobs": true, "top_logprobs": 2})"));
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_FLOAT_EQ(p->temperature, 0.5f);
  EXPECT_EQ(p->max_tokens, 7);
  EXPECT_EQ(*p->seed, 3u);
  EXPECT_EQ(p->stop, std::vector<std::string>{"END"});
  EXPECT_EQ(*p->logprobs, 2);
  auto arr = SamplingParams::from_json(nlohmann::json::parse(R"({"stop": ["a", "b"], "logprobs": 3})"));
  ASSERT_TRUE(arr.ok());
  EXPECT_EQ(arr->stop.size(), 2u);
  EXPECT_EQ(*arr->logprobs, 3);
  for (const auto& [body, words] : std::vector<std::pair<std::string, std::string>>{
           {R"({"stop": 5})", "stop must be a string or an array of strings"},
           {R"({"stop": ["a", 1]})", "stop must be a string or an array of strings"},
           {R"({"stop": {"x": 1}})", "stop must be a string or an array of strings"},
           {R"({"temperature": "hot"})", "temperature must be a number"},
           {R"({"max_tokens": 2.5})", "max_tokens must be an integer"},
           {R"({"seed": "x"})", "seed must be an integer"},
           {R"({"ignore_eos": 1})", "ignore_eos must be true or false"},
       }) {
    auto r = SamplingParams::from_json(nlohmann::json::parse(body));
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
  }
}

SamplingParams sampled(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

TEST(Sampler, GreedyAndTopOneTakeTheArgmax) {
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.0f};
  std::mt19937_64 rng(1);
  SamplingParams g = sampled(0.0f);
  EXPECT_EQ(sample_token(logits.data(), 4, g, {}, {}, &rng).token, 1);
  SamplingParams k1 = sampled(1.0f);
  k1.top_k = 1;
  SamplingParams p_small = sampled(1.0f);
  p_small.top_p = 0.01f;
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(sample_token(logits.data(), 4, k1, {}, {}, &rng).token, 1);
    EXPECT_EQ(sample_token(logits.data(), 4, p_small, {}, {}, &rng).token, 1);
  }
}

TEST(Sampler, TopPAndMinPKeepOnlyTheirCandidates) {
  // Probabilities about 0.50, 0.30, 0.15, 0.05.
  const std::vector<float> logits = {std::log(0.50f), std::log(0.30f), std::log(0.15f), std::log(0.05f)};
  std::mt19937_64 rng(7);
  SamplingParams top_p = sampled(1.0f);
  top_p.top_p = 0.75f;  // 0.5 + 0.3 reach it
  SamplingParams min_p = sampled(1.0f);
  min_p.min_p = 0.25f;  // at least 0.125: three tokens
  std::map<int, int> seen_p, seen_min;
  for (int i = 0; i < 2000; ++i) {
    ++seen_p[sample_token(logits.data(), 4, top_p, {}, {}, &rng).token];
    ++seen_min[sample_token(logits.data(), 4, min_p, {}, {}, &rng).token];
  }
  EXPECT_EQ(seen_p.size(), 2u);
  EXPECT_EQ(seen_min.size(), 3u);
  EXPECT_FALSE(seen_min.count(3));
  // Renormalized over 0.5 and 0.3: token 0 about 62%.
  EXPECT_NEAR(seen_p[0] / 2000.0, 0.625, 0.05);
}

TEST(Sampler, PenaltiesDemoteSeenTokens) {
  const std::vector<float> logits = {2.0f, 1.5f, 0.0f};
  std::mt19937_64 rng(1);
  SamplingParams rep = sampled(0.0f);
  rep.repetition_penalty = 2.0f;  // 2.0 -> 1.0 < 1.5
  EXPECT_EQ(sample_token(logits.data(), 3, rep, {0}, {}, &rng).token, 1);
  SamplingParams freq = sampled(0.0f);
  freq.frequency_penalty = 0.3f;  // 2.0 - 2 * 0.3 = 1.4 < 1.5
  EXPECT_EQ(sample_token(logits.data(), 3, freq, {}, {0, 0}, &rng).token, 1);
  SamplingParams pres = sampled(0.0f);
  pres.presence_penalty = 0.6f;  // 2.0 - 0.6 = 1.4
  EXPECT_EQ(sample_token(logits.data(), 3, pres, {}, {0}, &rng).token, 1);
  EXPECT_EQ(sample_token(logits.data(), 3, pres, {0}, {}, &rng).token, 0) << "presence counts the output only";
}

TEST(Sampler, SeedReproducesAndLogprobsAreTheModels) {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = std::sin(i * 0.7f);
  SamplingParams p = sampled(1.0f);
  p.logprobs = 3;
  std::mt19937_64 a(42), b(42), c(43);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 20; ++i) {
    ta.push_back(sample_token(logits.data(), 50, p, {}, {}, &a).token);
    tb.push_back(sample_token(logits.data(), 50, p, {}, {}, &b).token);
    tc.push_back(sample_token(logits.data(), 50, p, {}, {}, &c).token);
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
  const SampledToken t = sample_token(logits.data(), 50, p, {}, {}, &a);
  double z = 0;
  for (float l : logits) z += std::exp(l);
  EXPECT_NEAR(t.logprob, logits[t.token] - std::log(z), 1e-5);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_GE(t.top[0].second, t.top[1].second);
  EXPECT_GE(t.top[1].second, t.top[2].second);
  EXPECT_EQ(t.top[0].first, static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
}

TEST(Detokenizer, WaitsForWholeCharactersAndCutsAtStopStrings) {
  ByteTokenizer tok(512);
  IncrementalDetokenizer d(&tok, {});
  EXPECT_EQ(d.add({'a', 0xC3}), "a");
  EXPECT_EQ(d.add({0xA9}), "\xC3\xA9");
  EXPECT_EQ(d.add({0xE2, 0x82}), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD") << "an unfinished character at the end";
  IncrementalDetokenizer s(&tok, {"STOP", "\n\n"});
  std::string out;
  for (char c : std::string("hello ST")) out += s.add({static_cast<unsigned char>(c)});
  EXPECT_EQ(out, "hello") << "' ST' may still become STOP";
  out += s.add({'O', 'P', '!', '!'});
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.stop_string(), "STOP");
  EXPECT_EQ(out + s.flush(), "hello ");
  IncrementalDetokenizer n(&tok, {"STOP"});
  std::string text;
  for (char c : std::string("STEP STOOP")) text += n.add({static_cast<unsigned char>(c)});
  EXPECT_FALSE(n.stopped());
  EXPECT_EQ(text + n.flush(), "STEP STOOP");
}

std::vector<int32_t> run_alone(const DeepseekV4& model, const std::vector<int32_t>& prompt, const SamplingParams& p) {
  EngineOptions o;
  o.scheduler.max_num_seqs = 4;
  o.cache.memory_bytes = int64_t{64} << 20;
  auto e = Engine::create(&model, o);
  std::vector<int32_t> out;
  EXPECT_TRUE((*e)->add_request(prompt, p).ok());
  while ((*e)->has_unfinished())
    for (const auto& r : (*e)->step()) out.insert(out.end(), r.new_tokens.begin(), r.new_tokens.end());
  return out;
}

TEST(EngineRequests, BadRequestsAreRejectedAndDisturbNothingAccepted) {
  const DeepseekV4& model = golden_model("tiny-a");  // 128 positions, vocabulary 512
  EngineOptions o;
  o.scheduler.max_num_seqs = 4;
  o.scheduler.max_model_len = 100;
  o.cache.memory_bytes = int64_t{64} << 20;
  auto engine = Engine::create(&model, o);
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  const std::vector<int32_t> good_prompt = {5, 6, 7, 8, 9, 10};
  SamplingParams seeded;
  seeded.temperature = 0.9f;
  seeded.seed = 11;
  seeded.max_tokens = 15;
  seeded.ignore_eos = true;
  auto good = e.add_request(good_prompt, seeded);
  ASSERT_TRUE(good.ok());
  std::vector<int32_t> got;
  for (int i = 0; i < 3; ++i)
    for (const auto& r : e.step()) got.insert(got.end(), r.new_tokens.begin(), r.new_tokens.end());

  auto expect_rejected = [&](std::vector<int32_t> prompt, const SamplingParams& p, const std::string& words) {
    auto r = e.add_request(std::move(prompt), p);
    ASSERT_FALSE(r.ok()) << words;
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
  };
  SamplingParams neg = greedy(5);
  neg.max_tokens = -1;
  expect_rejected(good_prompt, neg, "max_tokens must be at least 1");
  SamplingParams p0 = greedy(5);
  p0.top_p = 0.0f;
  expect_rejected(good_prompt, p0, "top_p");
  expect_rejected(std::vector<int32_t>(120, 3), greedy(5), "max-model-len is 100");
  expect_rejected(std::vector<int32_t>(90, 3), greedy(20), "maximum context length is 100");
  expect_rejected({1, 2, 600}, greedy(5), "outside the vocabulary");
  expect_rejected({}, greedy(5), "empty");
  EXPECT_FALSE(e.finish(9999));

  while (e.has_unfinished())
    for (const auto& r : e.step()) got.insert(got.end(), r.new_tokens.begin(), r.new_tokens.end());
  EXPECT_EQ(got, run_alone(model, good_prompt, seeded)) << "the accepted request changed";
  EXPECT_EQ(e.cache().pages_in_use(), 0);
}

TEST(EngineRequests, StopTokenIdsEndWithStopAndMaxTokensWithLength) {
  const DeepseekV4& model = golden_model("tiny-a");
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  const std::vector<int32_t> free_run = run_alone(model, prompt, greedy(12));
  ASSERT_EQ(free_run.size(), 12u);
  EngineOptions o;
  o.scheduler.max_num_seqs = 4;
  o.cache.memory_bytes = int64_t{64} << 20;
  auto e = Engine::create(&model, o);
  SamplingParams stop_at = greedy(12);
  stop_at.stop_token_ids = {free_run[4]};
  auto id = (*e)->add_request(prompt, stop_at);
  auto capped = (*e)->add_request(prompt, greedy(5));
  ASSERT_TRUE(id.ok() && capped.ok());
  std::map<int64_t, std::vector<int32_t>> got;
  std::map<int64_t, FinishReason> why;
  while ((*e)->has_unfinished())
    for (const auto& r : (*e)->step()) {
      got[r.id].insert(got[r.id].end(), r.new_tokens.begin(), r.new_tokens.end());
      if (r.finished) why[r.id] = r.finish_reason;
      EXPECT_EQ(r.prompt_tokens, 8);
      EXPECT_EQ(r.completion_tokens, static_cast<int64_t>(got[r.id].size()));
    }
  const size_t first = std::find(free_run.begin(), free_run.end(), free_run[4]) - free_run.begin();
  EXPECT_EQ(got[*id], std::vector<int32_t>(free_run.begin(), free_run.begin() + first + 1));
  EXPECT_EQ(why[*id], FinishReason::kStop);
  EXPECT_EQ(got[*capped], std::vector<int32_t>(free_run.begin(), free_run.begin() + 5));
  EXPECT_EQ(why[*capped], FinishReason::kLength);
}

TEST(EngineRequests, SeededSamplingIsTheSameInAnyBatch) {
  const DeepseekV4& model = golden_model("tiny-a");
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 50;
  p.seed = 1234;
  p.max_tokens = 20;
  p.ignore_eos = true;
  const std::vector<int32_t> prompt = {10, 20, 30, 40, 50};
  const auto alone = run_alone(model, prompt, p);
  EngineOptions o;
  o.scheduler.max_num_seqs = 4;
  o.cache.memory_bytes = int64_t{64} << 20;
  auto e = Engine::create(&model, o);
  SamplingParams other = p;
  other.seed.reset();
  ASSERT_TRUE((*e)->add_request({7, 7, 7, 7, 7, 7, 7, 7, 7}, other).ok());
  auto id = (*e)->add_request(prompt, p);
  ASSERT_TRUE((*e)->add_request({1, 2, 3}, other).ok());
  std::vector<int32_t> got;
  while ((*e)->has_unfinished())
    for (const auto& r : (*e)->step())
      if (r.id == *id) got.insert(got.end(), r.new_tokens.begin(), r.new_tokens.end());
  EXPECT_EQ(got, alone);
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// Rejection sampling against a drafter's own distribution q: draw the draft
// from q, accept or replace it; the outcome must be distributed as
// sample_token's p. 200,000 draws over a 12-token vocabulary with top-k 8
// and a q unlike p (mass on tokens p excludes, too little on p's best): a
// chi-square goodness-of-fit test against p at the 0.001 level. Accepting
// every draft, or replacing from p instead of the residual, gives chi-square
// values in the thousands.
TEST(Sampler, SamplingAgainstADraftDistributionKeepsTheTargetDistribution) {
  const int64_t vocab = 12;
  const std::vector<float> logits = {2.0f, 1.5f, 0.3f, -0.2f, 1.1f, 0.0f, -1.0f, 0.7f, 2.2f, -0.5f, 0.4f, 1.0f};
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 8;
  // Two samples of n: sample_token's, and drafts from q accepted or replaced.
  std::mt19937_64 rng(7);
  const int n = 200000;
  std::vector<int> plain(vocab, 0), spec(vocab, 0);
  for (int i = 0; i < n; ++i) ++plain[sample_token(logits.data(), vocab, params, {}, {}, &rng).token];
  std::vector<float> q = {0.02f, 0.3f, 0.05f, 0.1f, 0.05f, 0.1f, 0.1f, 0.03f, 0.05f, 0.1f, 0.05f, 0.05f};
  std::discrete_distribution<int> from_q(q.begin(), q.end());
  int accepted_n = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t draft = from_q(rng);
    bool accepted = false;
    ++spec[sample_against_distribution(logits.data(), vocab, params, {}, {}, draft, q.data(), &rng, &accepted).token];
    accepted_n += accepted;
  }
  EXPECT_GT(accepted_n, n / 10);
  EXPECT_LT(accepted_n, n);
  // Two-sample chi-square over the tokens either drew (equal sample sizes);
  // the critical value at 0.001 (Wilson-Hilferty).
  double chi2 = 0.0;
  int cells = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    if (plain[v] == 0) {
      EXPECT_EQ(spec[v], 0) << "token " << v << " is outside p's candidates";
    }
    if (plain[v] + spec[v] == 0) continue;
    chi2 += static_cast<double>(plain[v] - spec[v]) * (plain[v] - spec[v]) / (plain[v] + spec[v]);
    ++cells;
  }
  const int df = cells - 1;
  const double z = 3.090232, a = 2.0 / (9.0 * df), critical = df * std::pow(1.0 - a + z * std::sqrt(a), 3);
  EXPECT_EQ(cells, 8) << "top-k 8";
  EXPECT_LT(chi2, critical);
  // Greedy: the argmax, accepted only when the draft is it.
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  bool accepted = true;
  EXPECT_EQ(sample_against_distribution(logits.data(), vocab, greedy, {}, {}, 1, q.data(), &rng, &accepted).token, 8);
  EXPECT_FALSE(accepted);
}

}  // namespace
}  // namespace dsv4
