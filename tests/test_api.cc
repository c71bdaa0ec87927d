// The serving core without sockets: the engine service answers submits,
// aborts and metrics while a long step runs; a Generation counts usage once
// per prompt and scores the prompt like decoding scores its tokens; the
// OpenAI stream's text offsets run on from the echoed prompt.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <thread>

#include "runtime/local_executor.h"
#include "server/generation.h"
#include "server/openai_response.h"
#include "test_util.h"
#include "tokenizer/byte_tokenizer.h"

namespace dsv4 {
namespace {

using Clock = std::chrono::steady_clock;
using testing::golden_model;

// Every step takes at least `delay` (a real model's step takes seconds);
// while held, a step does not end until release() (or a minute passes, so a
// call that waited for the step shows as a step that timed out, not a hang).
class SlowExecutor : public StepExecutor {
 public:
  SlowExecutor(std::unique_ptr<StepExecutor> inner, std::chrono::milliseconds delay)
      : inner_(std::move(inner)), delay_(delay) {}
  const ModelConfig& config() const override { return inner_->config(); }
  int num_groups() const override { return inner_->num_groups(); }
  KvCacheManager* cache(int group) override { return inner_->cache(group); }
  StatusOr<std::vector<SampledLogits>> run(const StepPlan& plan) override {
    in_step = true;
    std::this_thread::sleep_for(delay_);
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!released_.wait_for(lock, std::chrono::minutes(1), [&] { return !held_; })) timed_out = true;
    }
    auto r = inner_->run(plan);
    in_step = false;
    return r;
  }
  std::string describe() const override { return inner_->describe(); }
  void hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    released_.notify_all();
  }
  std::atomic<bool> in_step{false}, timed_out{false};

 private:
  std::mutex mu_;
  std::condition_variable released_;
  bool held_ = false;
  std::unique_ptr<StepExecutor> inner_;
  std::chrono::milliseconds delay_;
};

std::unique_ptr<EngineService> service_over(const DeepseekV4& model, SlowExecutor** slow,
                                            std::chrono::milliseconds delay, int64_t max_queue = 64) {
  EngineOptions o;
  o.scheduler.max_model_len = 128;
  o.scheduler.max_num_seqs = 8;
  o.cache.memory_bytes = 64ll << 20;
  auto cache = Engine::cache_options(model.config(), o);
  EXPECT_TRUE(cache.ok()) << cache.status().message();
  auto local = LocalExecutor::single(&model, *cache);
  EXPECT_TRUE(local.ok()) << local.status().message();
  auto executor = std::make_unique<SlowExecutor>(std::move(*local), delay);
  if (slow) *slow = executor.get();
  auto engine = Engine::create(std::move(executor), o.scheduler);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  EngineServiceOptions so;
  so.max_queue = max_queue;
  return std::make_unique<EngineService>(std::move(*engine), so);
}

ChoiceRequest request(std::vector<int32_t> prompt, int64_t max_tokens) {
  ChoiceRequest r;
  r.prompt = std::move(prompt);
  r.params = testing::greedy(max_tokens);
  r.params.ignore_eos = true;
  return r;
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

TEST(EngineCore, SubmitAbortAndMetricsAnswerWhileALongStepRuns) {
  SlowExecutor* slow = nullptr;
  auto service = service_over(golden_model("tiny-a"), &slow, std::chrono::milliseconds(0));
  slow->hold();  // the first step cannot end until the calls below returned
  auto channel = std::make_shared<EventChannel>();
  std::vector<ChoiceRequest> first;
  first.push_back(request({1, 2, 3, 4}, 50));
  auto ids = service->submit(std::move(first), channel);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!slow->in_step && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(slow->in_step.load());
  // Inside a step that is held: each call returns without waiting for it.
  auto t = Clock::now();
  service->snapshot();
  const double snapshot_ms = ms_since(t);
  std::vector<ChoiceRequest> second;
  second.push_back(request({5, 6, 7}, 3));
  t = Clock::now();
  auto second_channel = std::make_shared<EventChannel>();
  auto more = service->submit(std::move(second), second_channel);
  const double submit_ms = ms_since(t);
  ASSERT_TRUE(more.ok());
  t = Clock::now();
  service->finish((*ids)[0], FinishReason::kAbort);
  const double finish_ms = ms_since(t);
  slow->release();
  EXPECT_FALSE(slow->timed_out.load()) << "a call waited for the step it came during";
  std::printf("  during a held step: snapshot %.3f ms, submit %.3f ms, abort %.3f ms\n", snapshot_ms, submit_ms,
              finish_ms);
  // The abort reached the request's channel as a finished event, and the
  // request submitted during the step ran to its end.
  ChoiceEvent e;
  bool finished = false;
  while (!finished && channel->pop(&e, 60000)) finished = e.output.finished;
  EXPECT_TRUE(finished);
  EXPECT_EQ(e.output.finish_reason, FinishReason::kAbort);
  int tokens = 0;
  finished = false;
  while (!finished && second_channel->pop(&e, 60000)) {
    tokens += static_cast<int>(e.output.new_tokens.size());
    finished = e.output.finished;
  }
  EXPECT_TRUE(finished);
  EXPECT_EQ(tokens, 3);
  EXPECT_EQ(e.output.finish_reason, FinishReason::kLength);
  // And the metrics say so once the loop has published them.
  EngineSnapshot snap = service->snapshot();
  for (int i = 0; i < 60000 && snap.running + snap.waiting > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    snap = service->snapshot();
  }
  EXPECT_EQ(snap.running, 0);
  EXPECT_EQ(snap.waiting, 0);
  service->shutdown(10000);
}

TEST(EngineCore, ABatchIsAdmittedWholeAndOverloadIsTransient) {
  auto service = service_over(golden_model("tiny-a"), nullptr, std::chrono::milliseconds(50), /*max_queue=*/4);
  // Larger than max_queue, into an empty queue: taken whole. Eight run at
  // once for 20 steps of 50 ms, so four wait for a second at least (a
  // loaded machine may pause this thread for a while between submits).
  std::vector<ChoiceRequest> batch;
  for (int i = 0; i < 12; ++i) batch.push_back(request({1, 2, static_cast<int32_t>(3 + i)}, 20));
  auto channel = std::make_shared<EventChannel>();
  auto ids = service->submit(std::move(batch), channel);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_EQ(ids->size(), 12u);
  // Behind it, the queue is full for now: a retryable refusal.
  std::vector<ChoiceRequest> next;
  next.push_back(request({9, 9}, 2));
  auto refused = service->submit(std::move(next), std::make_shared<EventChannel>());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  int done = 0;
  ChoiceEvent e;
  while (done < 12 && channel->pop(&e, 10000)) done += e.output.finished;
  EXPECT_EQ(done, 12);
  // A bad request is refused at submit, before anything queues.
  std::vector<ChoiceRequest> bad;
  bad.push_back(request({1, 2, 999999}, 2));
  auto invalid = service->submit(std::move(bad), std::make_shared<EventChannel>());
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.status().code(), StatusCode::kInvalidArgument);
  service->shutdown(10000);
}

// Runs a generation to the end.
void finish(Generation& g) {
  ChoiceUpdate u;
  while (!g.done()) g.next(&u, 1000);
}

TEST(GenerationFormats, UsageCountsEachPromptOnceAndEchoScoresThePrompt) {
  const DeepseekV4& model = golden_model("tiny-a");
  auto service = service_over(model, nullptr, std::chrono::milliseconds(0));
  ByteTokenizer tok(model.config().vocab_size);
  const std::vector<int32_t> prompt = {72, 101, 108, 108, 111, 44, 32};
  // Force a known continuation ('Z' x 3) with logit_bias; its logprobs are
  // the model's own, so scoring prompt + continuation must find them again.
  GenerationSpec spec;
  spec.prompts = {prompt};
  spec.n = 3;
  spec.params = testing::greedy(3);
  spec.params.ignore_eos = true;
  spec.params.logprobs = 1;
  spec.params.logit_bias = {{90, 100.0f}};
  spec.endpoint = "completions";
  auto gen = Generation::start(service.get(), &tok, spec, nullptr);
  ASSERT_TRUE(gen.ok()) << gen.status().message();
  finish(**gen);
  const Usage u = (*gen)->usage();
  EXPECT_EQ(u.prompt_tokens, static_cast<int64_t>(prompt.size())) << "n=3 counts the prompt once";
  EXPECT_EQ(u.completion_tokens, 9);
  const GenerationChoice& c = (*gen)->choice(0);
  ASSERT_EQ(c.tokens, std::vector<int32_t>({90, 90, 90}));

  // lm-evaluation-harness: prompt = context + continuation, echo, logprobs,
  // max_tokens 0.
  GenerationSpec score;
  score.prompts = {prompt};
  score.prompts[0].insert(score.prompts[0].end(), {90, 90, 90});
  score.params = testing::greedy(0);
  score.params.logprobs = 1;
  score.params.prompt_logprobs = 1;
  score.endpoint = "completions";
  auto scored = Generation::start(service.get(), &tok, score, nullptr);
  ASSERT_TRUE(scored.ok()) << scored.status().message();
  finish(**scored);
  const GenerationChoice& s = (*scored)->choice(0);
  EXPECT_TRUE(s.tokens.empty());
  EXPECT_EQ(s.finish_reason, "length");
  ASSERT_EQ(s.prompt_logprobs.size(), score.prompts[0].size() - 1);
  for (int k = 0; k < 3; ++k) {
    const SampledToken& p = s.prompt_logprobs[prompt.size() - 1 + k];
    EXPECT_EQ(p.token, 90);
    // One prefill row against a decode step: the same math over other
    // shapes (rounding differs in the last bits, ~1e-6 measured).
    EXPECT_NEAR(p.logprob, c.logprobs[k].logprob, 1e-5) << "continuation token " << k;
    ASSERT_EQ(p.top.size(), 1u);
  }

  // The OpenAI format: first prompt entry null, text_offset from the text's
  // start, continuing in the stream.
  GenerationPlan plan;
  plan.prompts = score.prompts;
  plan.echo = true;
  plan.logprobs = 1;
  plan.model = "m";
  OpenAiContext ctx{"cmpl-1", 0, &plan, &tok};
  const nlohmann::ordered_json body = openai_body(ctx, **scored);
  const auto& lp = body["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), score.prompts[0].size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(body["choices"][0]["text"], "Hello, ZZZ");
  for (size_t k = 0; k < lp["text_offset"].size(); ++k) EXPECT_EQ(lp["text_offset"][k], k);
  EXPECT_EQ(body["usage"]["completion_tokens"], 0);
}

TEST(GenerationFormats, StreamedEchoAndOffsetsMatchTheBody) {
  const DeepseekV4& model = golden_model("tiny-a");
  auto service = service_over(model, nullptr, std::chrono::milliseconds(0));
  ByteTokenizer tok(model.config().vocab_size);
  GenerationSpec spec;
  spec.prompts = {{65, 66, 67, 68}};
  spec.params = testing::greedy(5);
  spec.params.ignore_eos = true;
  spec.params.logprobs = 0;
  spec.params.prompt_logprobs = 0;
  spec.params.logit_bias = {{97, 100.0f}};  // 'a' every time: one byte per token
  spec.endpoint = "completions";
  auto gen = Generation::start(service.get(), &tok, spec, nullptr);
  ASSERT_TRUE(gen.ok());
  GenerationPlan plan;
  plan.prompts = spec.prompts;
  plan.echo = true;
  plan.logprobs = 0;
  plan.stream = true;
  OpenAiContext ctx{"cmpl-2", 0, &plan, &tok};
  OpenAiStream stream(ctx, **gen);
  std::vector<std::string> events = stream.begin();
  ChoiceUpdate u;
  while (!(*gen)->done())
    if ((*gen)->next(&u, 1000))
      for (auto& e : stream.update(u)) events.push_back(e);
  std::string text;
  std::vector<int64_t> offsets;
  for (const std::string& e : events) {
    ASSERT_EQ(e.rfind("data: ", 0), 0u);
    const auto j = nlohmann::json::parse(e.substr(6));
    text += j["choices"][0]["text"].get<std::string>();
    const auto& lp = j["choices"][0]["logprobs"];
    if (!lp.is_null())
      for (const auto& o : lp["text_offset"]) offsets.push_back(o.get<int64_t>());
  }
  EXPECT_EQ(text, "ABCDaaaaa");
  ASSERT_EQ(offsets.size(), 9u);
  for (size_t k = 0; k < offsets.size(); ++k) EXPECT_EQ(offsets[k], static_cast<int64_t>(k)) << "offset " << k;
  EXPECT_EQ(openai_body(ctx, **gen)["choices"][0]["text"], text);
}

}  // namespace
}  // namespace dsv4
