#include "server/generation.h"

#include <algorithm>
#include <map>

namespace dsv4 {

using Clock = std::chrono::steady_clock;

Generation::Generation(EngineService* service, GenerationSpec spec, Metrics* metrics, std::function<void()> on_event)
    : service_(service),
      spec_(std::move(spec)),
      metrics_(metrics),
      channel_(std::make_shared<EventChannel>(std::move(on_event))) {}

StatusOr<std::unique_ptr<Generation>> Generation::start(EngineService* service, const Tokenizer* tokenizer,
                                                        GenerationSpec spec, Metrics* metrics,
                                                        std::function<void()> on_event) {
  std::unique_ptr<Generation> g(new Generation(service, std::move(spec), metrics, std::move(on_event)));
  const GenerationSpec& s = g->spec_;
  const size_t count = s.prompts.size() * s.n;
  std::vector<ChoiceRequest> requests(count);
  g->choices_.resize(count);
  const std::vector<int32_t> skip = {tokenizer->bos_id(), tokenizer->eos_id(), service->config().eos_token_id};
  for (size_t i = 0; i < count; ++i) {
    requests[i].prompt = s.prompts[i / s.n];
    requests[i].params = s.params;
    // n choices differ, and repeat with the seed.
    if (s.params.seed) requests[i].params.seed = *s.params.seed + i % s.n;
    GenerationChoice& c = g->choices_[i];
    c.prompt = static_cast<int>(i / s.n);
    c.prompt_tokens = static_cast<int64_t>(requests[i].prompt.size());
    c.last_token = g->arrival_;
    const ChatFormat format = service->config().family == ModelFamily::kV41 ? ChatFormat::kV41 : ChatFormat::kV4;
    c.text = std::make_unique<ChoiceText>(tokenizer, s.params.stop, skip, s.chat, s.mode, s.parse_tools, format);
  }
  DSV4_ASSIGN_OR_RETURN(std::vector<int64_t> ids, service->submit(std::move(requests), g->channel_));
  for (size_t i = 0; i < count; ++i) g->choices_[i].engine_id = ids[i];
  return g;
}

Generation::~Generation() {
  channel_->clear_listener();  // whoever listened is going away with us
  // Counted before the engine hears of an abort: whoever then sees the
  // request's pages come back sees it counted (a reader cut at the write
  // timeout was counted only after, and a metrics read could fall between).
  if (metrics_) {
    const Usage u = usage();
    metrics_->add_tokens(u.prompt_tokens, u.completion_tokens);
    for (const GenerationChoice& c : choices_) metrics_->count_request(spec_.endpoint, c.finished ? c.finish_reason : "abort");
  }
  abort();  // a handler that leaves early (an exception, a closed socket) leaves nothing running
}

void Generation::end(GenerationChoice& c, std::string reason) {
  c.finished = true;
  c.finish_reason = std::move(reason);
  ++done_;
}

void Generation::abort() {
  for (GenerationChoice& c : choices_)
    if (!c.finished) {
      service_->finish(c.engine_id, FinishReason::kAbort);
      end(c, "abort");
    }
}

void Generation::hold(bool held) {
  for (const GenerationChoice& c : choices_)
    if (!c.finished) service_->hold(c.engine_id, held);
}

bool Generation::next(ChoiceUpdate* u, int timeout_ms) {
  ChoiceEvent ev;
  for (;;) {
    if (done()) return false;
    if (!channel_->pop(&ev, timeout_ms)) return false;
    GenerationChoice& c = choices_[ev.choice];
    if (!c.finished) break;  // else: the echo of our own abort or stop
  }
  GenerationChoice& c = choices_[ev.choice];
  const RequestOutput& o = ev.output;
  *u = ChoiceUpdate{};
  u->choice = ev.choice;
  u->logprobs_from = c.logprobs.size();
  u->prompt_logprobs_from = c.prompt_logprobs.size();
  if (!o.new_tokens.empty() && metrics_) {
    const auto now = Clock::now();
    if (c.tokens.empty()) {
      metrics_->observe_ttft(std::chrono::duration<double>(now - arrival_).count());
    } else {  // a step may bring several tokens (speculative decoding): the interval is theirs
      const double each = std::chrono::duration<double>(now - c.last_token).count() / o.new_tokens.size();
      for (size_t i = 0; i < o.new_tokens.size(); ++i) metrics_->observe_time_per_output_token(each);
    }
    c.last_token = now;
  }
  if (o.prompt_tokens > 0) {  // from an engine step (not a cancellation)
    c.cached_tokens = o.cached_tokens;
    c.drafts_proposed = o.drafts_proposed;
    c.drafts_accepted = o.drafts_accepted;
  }
  c.prompt_logprobs.insert(c.prompt_logprobs.end(), o.prompt_logprobs.begin(), o.prompt_logprobs.end());
  // Token by token: when a stop string ends inside a step's tokens (a
  // speculative step brings several), the ones after it are not output.
  size_t kept = 0;
  while (kept < o.new_tokens.size() && !c.text->stopped()) {
    if (c.text->in_reasoning()) ++c.reasoning_tokens;
    const TextDelta d = c.text->add({o.new_tokens[kept++]});
    u->delta.reasoning += d.reasoning;
    u->delta.content += d.content;
  }
  c.tokens.insert(c.tokens.end(), o.new_tokens.begin(), o.new_tokens.begin() + kept);
  c.logprobs.insert(c.logprobs.end(), o.new_logprobs.begin(),
                    o.new_logprobs.begin() + std::min(kept, o.new_logprobs.size()));
  if (!o.error.empty()) c.error = o.error;
  std::string reason;
  if (!o.finished && c.text->stopped()) {  // a stop string: end it here
    service_->finish(c.engine_id, FinishReason::kStop);
    reason = "stop";
  } else if (o.finished) {
    reason = c.text->stopped() ? "stop" : finish_reason_name(o.finish_reason);
  }
  if (!reason.empty()) {
    const TextDelta tail = c.text->finish();
    u->delta.reasoning += tail.reasoning;
    u->delta.content += tail.content;
    if (!c.text->tool_calls().empty()) reason = "tool_calls";
    end(c, reason);
    u->finished = true;
  }
  return true;
}

Usage Generation::usage() const {
  Usage u;
  std::map<int, int64_t> cached;  // per prompt: its best prefix hit
  for (const GenerationChoice& c : choices_) {
    u.completion_tokens += static_cast<int64_t>(c.tokens.size());
    cached[c.prompt] = std::max(cached[c.prompt], c.cached_tokens);
  }
  for (const auto& p : spec_.prompts) u.prompt_tokens += static_cast<int64_t>(p.size());
  for (const auto& [prompt, n] : cached) u.cached_tokens += n;
  return u;
}

std::string Generation::summary() const {
  int64_t proposed = 0, accepted = 0;
  for (const GenerationChoice& c : choices_) {
    proposed += c.drafts_proposed;
    accepted += c.drafts_accepted;
  }
  const Usage u = usage();
  std::string s = "tokens " + std::to_string(u.prompt_tokens) + " prompt + " + std::to_string(u.completion_tokens) +
                  " generated";
  if (u.cached_tokens) s += ", " + std::to_string(u.cached_tokens) + " prompt tokens cached";
  if (proposed) s += ", " + std::to_string(accepted) + "/" + std::to_string(proposed) + " draft tokens accepted";
  return s;
}

}  // namespace dsv4
