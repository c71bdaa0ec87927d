#include "server/openai_response.h"

#include <algorithm>

#include "tokenizer/incremental_detokenizer.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;

std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

ordered_json bytes_of(const std::string& s) {
  ordered_json a = ordered_json::array();
  for (unsigned char c : s) a.push_back(c);
  return a;
}

// Completions' logprobs object, built row by row; text_offset counts bytes
// from the start of the choice's text (the echoed prompt included).
struct CompletionLogprobs {
  ordered_json tokens = ordered_json::array(), lps = ordered_json::array(), tops = ordered_json::array(),
               offsets = ordered_json::array();

  void add(const std::string& text, ordered_json lp, ordered_json top, int64_t* offset) {
    tokens.push_back(text);
    lps.push_back(std::move(lp));
    tops.push_back(std::move(top));
    offsets.push_back(*offset);
    *offset += static_cast<int64_t>(text.size());
  }
  void add(const Tokenizer& tok, const SampledToken& t, int64_t* offset) {
    ordered_json top = ordered_json::object();
    for (const auto& [id, lp] : t.top) top[token_text(tok, id)] = lp;
    add(token_text(tok, t.token), t.logprob, std::move(top), offset);
  }
  ordered_json json() const {
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }
};

// Echo: prompt positions [from, to) as logprob rows (position 0 has no
// score: null, as OpenAI and lm-evaluation-harness expect); their text.
std::string add_prompt_rows(const Tokenizer& tok, const GenerationChoice& c, const std::vector<int32_t>& prompt,
                            size_t from, size_t to, CompletionLogprobs* out, int64_t* offset) {
  std::string text;
  for (size_t p = from; p < to; ++p) {
    const std::string t = token_text(tok, prompt[p]);
    text += t;
    if (p == 0) out->add(t, nullptr, nullptr, offset);
    else out->add(tok, c.prompt_logprobs[p - 1], offset);
  }
  return text;
}

ordered_json chat_logprobs(const Tokenizer& tok, const std::vector<SampledToken>& rows, size_t from) {
  ordered_json content = ordered_json::array();
  for (size_t i = from; i < rows.size(); ++i) {
    const SampledToken& t = rows[i];
    ordered_json top = ordered_json::array();
    for (const auto& [id, lp] : t.top)
      top.push_back({{"token", token_text(tok, id)}, {"logprob", lp}, {"bytes", bytes_of(tok.token_bytes(id))}});
    content.push_back({{"token", token_text(tok, t.token)},
                       {"logprob", t.logprob},
                       {"bytes", bytes_of(tok.token_bytes(t.token))},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

ordered_json tool_calls_json(const std::string& rid, const GenerationChoice& c, bool with_index) {
  ordered_json calls = ordered_json::array();
  for (size_t k = 0; k < c.text->tool_calls().size(); ++k) {
    const ParsedToolCall& t = c.text->tool_calls()[k];
    ordered_json call = ordered_json::object();
    if (with_index) call["index"] = k;
    call["id"] = "call_" + rid.substr(rid.find('-') + 1) + "_" + std::to_string(k);
    call["type"] = "function";
    call["function"] = {{"name", t.name}, {"arguments", t.arguments}};
    calls.push_back(call);
  }
  return calls;
}

ordered_json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

ordered_json or_null(const std::string& s) { return s.empty() ? ordered_json() : ordered_json(s); }

}  // namespace

std::string token_text(const Tokenizer& tok, int32_t id) {
  std::string rest;
  std::string t = utf8_complete_prefix(tok.token_bytes(id), &rest);
  if (!rest.empty()) t += "\xEF\xBF\xBD";
  return t;
}

ordered_json openai_body(const OpenAiContext& ctx, const Generation& gen) {
  const GenerationPlan& plan = *ctx.plan;
  const Tokenizer& tok = *ctx.tokenizer;
  ordered_json choices = ordered_json::array();
  for (size_t i = 0; i < gen.size(); ++i) {
    const GenerationChoice& c = gen.choice(i);
    if (plan.chat) {
      ordered_json msg = {{"role", "assistant"}, {"content", or_null(c.text->content())}};
      if (plan.mode == ChatMode::kThinking) msg["reasoning_content"] = c.text->reasoning();
      if (!c.text->tool_calls().empty()) msg["tool_calls"] = tool_calls_json(ctx.id, c, false);
      const ordered_json lp = plan.logprobs ? chat_logprobs(tok, c.logprobs, 0) : ordered_json();
      choices.push_back({{"index", i}, {"message", msg}, {"logprobs", lp}, {"finish_reason", c.finish_reason}});
      continue;
    }
    const std::vector<int32_t>& prompt = plan.prompts[c.prompt];
    std::string text = c.text->content();
    ordered_json lp;
    if (plan.logprobs) {
      CompletionLogprobs rows;
      int64_t offset = 0;
      if (plan.echo) text = add_prompt_rows(tok, c, prompt, 0, std::min(prompt.size(), c.prompt_logprobs.size() + 1), &rows, &offset) + text;
      for (const SampledToken& t : c.logprobs) rows.add(tok, t, &offset);
      lp = rows.json();
    } else if (plan.echo) {
      text = tok.decode(prompt) + text;
    }
    choices.push_back({{"index", i}, {"text", text}, {"logprobs", lp}, {"finish_reason", c.finish_reason}});
  }
  return {{"id", ctx.id},
          {"object", plan.chat ? "chat.completion" : "text_completion"},
          {"created", ctx.created},
          {"model", plan.model},
          {"choices", choices},
          {"usage", usage_json(gen.usage())}};
}

OpenAiStream::OpenAiStream(OpenAiContext ctx, const Generation& gen)
    : ctx_(std::move(ctx)), gen_(gen), text_offset_(gen.size(), 0), echoed_(gen.size(), 0) {}

std::string OpenAiStream::event(const ordered_json& choice) const {
  ordered_json j = {{"id", ctx_.id},
                    {"object", ctx_.plan->chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", ctx_.created},
                    {"model", ctx_.plan->model},
                    {"choices", ordered_json::array({choice})}};
  return "data: " + dump(j) + "\n\n";
}

std::vector<std::string> OpenAiStream::begin() {
  std::vector<std::string> out;
  const GenerationPlan& plan = *ctx_.plan;
  for (size_t i = 0; i < gen_.size(); ++i) {
    if (plan.chat) {
      out.push_back(event({{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}));
    } else if (plan.echo && !plan.logprobs) {
      const std::vector<int32_t>& prompt = plan.prompts[gen_.choice(i).prompt];
      const std::string text = ctx_.tokenizer->decode(prompt);
      text_offset_[i] += static_cast<int64_t>(text.size());
      echoed_[i] = prompt.size();
      out.push_back(event({{"index", i}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", nullptr}}));
    }
  }
  return out;
}

std::vector<std::string> OpenAiStream::update(const ChoiceUpdate& u) {
  std::vector<std::string> out;
  const GenerationPlan& plan = *ctx_.plan;
  const Tokenizer& tok = *ctx_.tokenizer;
  const GenerationChoice& c = gen_.choice(u.choice);
  if (!plan.chat && plan.echo && plan.logprobs) {  // the prompt as its scores arrive
    const std::vector<int32_t>& prompt = plan.prompts[c.prompt];
    const size_t to = std::min(prompt.size(), c.prompt_logprobs.size() + 1);
    if (echoed_[u.choice] < to) {
      CompletionLogprobs rows;
      const std::string text = add_prompt_rows(tok, c, prompt, echoed_[u.choice], to, &rows, &text_offset_[u.choice]);
      echoed_[u.choice] = to;
      out.push_back(event({{"index", u.choice}, {"text", text}, {"logprobs", rows.json()}, {"finish_reason", nullptr}}));
    }
  }
  const bool new_logprobs = plan.logprobs && c.logprobs.size() > u.logprobs_from;
  if (!u.delta.empty() || new_logprobs) {
    if (plan.chat) {
      ordered_json delta = ordered_json::object();
      if (!u.delta.reasoning.empty()) delta["reasoning_content"] = u.delta.reasoning;
      if (!u.delta.content.empty()) delta["content"] = u.delta.content;
      const ordered_json lp = new_logprobs ? chat_logprobs(tok, c.logprobs, u.logprobs_from) : ordered_json();
      out.push_back(event({{"index", u.choice}, {"delta", delta}, {"logprobs", lp}, {"finish_reason", nullptr}}));
    } else {
      ordered_json lp;
      if (new_logprobs) {
        CompletionLogprobs rows;
        int64_t offset = text_offset_[u.choice];
        for (size_t k = u.logprobs_from; k < c.logprobs.size(); ++k) rows.add(tok, c.logprobs[k], &offset);
        lp = rows.json();
      }
      text_offset_[u.choice] += static_cast<int64_t>(u.delta.content.size());
      out.push_back(event({{"index", u.choice}, {"text", u.delta.content}, {"logprobs", lp}, {"finish_reason", nullptr}}));
    }
  }
  if (u.finished) {
    if (plan.chat && !c.text->tool_calls().empty())
      out.push_back(event({{"index", u.choice}, {"delta", {{"tool_calls", tool_calls_json(ctx_.id, c, true)}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}));
    out.push_back(plan.chat ? event({{"index", u.choice}, {"delta", ordered_json::object()}, {"logprobs", nullptr}, {"finish_reason", c.finish_reason}})
                            : event({{"index", u.choice}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", c.finish_reason}}));
  }
  return out;
}

std::vector<std::string> OpenAiStream::end() {
  std::vector<std::string> out;
  if (ctx_.plan->include_usage) {
    ordered_json j = {{"id", ctx_.id},
                      {"object", ctx_.plan->chat ? "chat.completion.chunk" : "text_completion"},
                      {"created", ctx_.created},
                      {"model", ctx_.plan->model},
                      {"choices", ordered_json::array()},
                      {"usage", usage_json(gen_.usage())}};
    out.push_back("data: " + dump(j) + "\n\n");
  }
  out.push_back("data: [DONE]\n\n");
  return out;
}

}  // namespace dsv4
