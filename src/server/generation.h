// One API request's run through the engine, whatever its wire format:
// submits its choices (prompts x n) as one unit, folds engine events into
// each choice's text (detokenized, cut at stop strings, split into
// reasoning / content / tool calls), logprobs and usage, and aborts what
// still runs when the client goes. The OpenAI and Anthropic formats render
// it; nothing here knows about HTTP.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/choice_text.h"
#include "server/engine_service.h"
#include "server/metrics.h"

namespace dsv4 {

struct GenerationSpec {
  std::vector<std::vector<int32_t>> prompts;
  int n = 1;  // choices per prompt
  SamplingParams params;
  bool chat = false;
  ChatMode mode = ChatMode::kChat;
  bool parse_tools = false;
  std::string endpoint;  // for metrics: completions, chat, messages
};

struct GenerationChoice {
  int prompt = 0;  // index into the spec's prompts
  int64_t engine_id = -1;
  std::unique_ptr<ChoiceText> text;
  bool finished = false;
  std::string finish_reason;  // stop, length, tool_calls, abort
  std::string error;          // why the engine gave up on it
  std::vector<int32_t> tokens;
  std::vector<SampledToken> logprobs;         // per token, when asked
  std::vector<SampledToken> prompt_logprobs;  // prompt positions 1.., when asked
  int64_t prompt_tokens = 0, cached_tokens = 0;
  int64_t drafts_proposed = 0, drafts_accepted = 0;
  int64_t reasoning_tokens = 0;  // of tokens, those before </think> (and it)
  std::chrono::steady_clock::time_point last_token;
};

// What one engine event changed in a choice.
struct ChoiceUpdate {
  int choice = 0;
  TextDelta delta;
  size_t logprobs_from = 0;         // the new entries of logprobs
  size_t prompt_logprobs_from = 0;  // and of prompt_logprobs
  bool finished = false;            // ended with this event
};

struct Usage {
  int64_t prompt_tokens = 0;  // each prompt once, however many choices it has
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

class Generation {
 public:
  // Submits every choice; on error nothing runs (the status says why: see
  // EngineService::submit). on_event, when given, is called (on the engine's
  // thread, or the one aborting) whenever an event waits for next(); it
  // must only hand the news on, never call back in.
  static StatusOr<std::unique_ptr<Generation>> start(EngineService* service, const Tokenizer* tokenizer,
                                                     GenerationSpec spec, Metrics* metrics,
                                                     std::function<void()> on_event = nullptr);
  ~Generation();

  // Waits up to timeout_ms (0: not at all) for the next engine event and
  // applies it; false when there is none (or every choice is done).
  bool next(ChoiceUpdate* update, int timeout_ms);
  bool done() const { return done_ == choices_.size(); }
  // The client is gone: every running choice ends as "abort" now.
  void abort();
  // The client is behind: every running choice pauses (keeping its pages)
  // until let go (EngineService::hold).
  void hold(bool held);

  size_t size() const { return choices_.size(); }
  const GenerationChoice& choice(size_t i) const { return choices_[i]; }
  const GenerationSpec& spec() const { return spec_; }
  Usage usage() const;
  // "tokens 20 prompt + 12 generated, 4 prompt tokens cached, ..." for the
  // request's access-log line.
  std::string summary() const;

 private:
  Generation(EngineService* service, GenerationSpec spec, Metrics* metrics, std::function<void()> on_event);
  void end(GenerationChoice& c, std::string reason);

  EngineService* service_;
  GenerationSpec spec_;
  Metrics* metrics_;
  std::shared_ptr<EventChannel> channel_;
  std::vector<GenerationChoice> choices_;
  size_t done_ = 0;
  std::chrono::steady_clock::time_point arrival_ = std::chrono::steady_clock::now();
};

}  // namespace dsv4
