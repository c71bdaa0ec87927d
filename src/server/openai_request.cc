#include "server/openai_request.h"

#include <algorithm>
#include <cctype>

#include "server/request_json.h"
#include "server/structured_output.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;

PlanOrError fail(std::string message, std::string param = "", std::string code = "invalid_value") {
  PlanOrError r;
  r.error = api_error(400, std::move(message), std::move(param), std::move(code));
  return r;
}

PlanOrError fail(const ApiError& e) { return {std::nullopt, e}; }

// Sampling errors start with the field they are about ("top_p must be ...").
std::string leading_field(const std::string& message) {
  size_t n = 0;
  while (n < message.size() && (std::islower(static_cast<unsigned char>(message[n])) || message[n] == '_')) ++n;
  const std::string field = message.substr(0, n);
  for (const char* known : {"temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                            "repetition_penalty", "max_tokens", "max_completion_tokens", "seed", "ignore_eos", "stop",
                            "stop_token_ids", "logprobs", "top_logprobs", "prompt_logprobs", "logit_bias"})
    if (field == known) return field;
  return "";
}

// Common fields: n, stream, stream_options, sampling (model: check_model).
std::optional<ApiError> read_common(const ordered_json& b, const ServedModel& m, GenerationPlan* p) {
  if (auto e = check_model(b, m, &p->model)) return e;
  if (b.contains("n") && !b["n"].is_null()) {
    if (!b["n"].is_number_integer()) return api_error(400, "n must be an integer", "n", "invalid_type");
    const int64_t n = b["n"].get<int64_t>();
    if (n < 1 || n > 16) return api_error(400, "n must be between 1 and 16, got " + std::to_string(n), "n", "invalid_value");
    p->n = static_cast<int>(n);
  }
  if (b.contains("stream") && !b["stream"].is_null()) {
    if (!b["stream"].is_boolean()) return api_error(400, "stream must be true or false", "stream", "invalid_type");
    p->stream = b["stream"].get<bool>();
  }
  if (b.contains("stream_options") && !b["stream_options"].is_null()) {
    const auto& so = b["stream_options"];
    if (!so.is_object()) return api_error(400, "stream_options must be an object", "stream_options", "invalid_type");
    if (so.contains("include_usage")) {
      if (!so["include_usage"].is_boolean())
        return api_error(400, "stream_options.include_usage must be a boolean", "stream_options", "invalid_type");
      p->include_usage = so["include_usage"].get<bool>();
    }
  }
  auto params = SamplingParams::from_json(nlohmann::json::parse(b.dump()));
  if (!params.ok()) return api_error(400, params.status().message(), leading_field(params.status().message()), "invalid_value");
  p->params = *params;
  return std::nullopt;
}

// Lengths against max_model_len (prompt_param names the prompt's field),
// then the sampling ranges.
std::optional<ApiError> check_params(GenerationPlan* p, const ServedModel& m, const char* prompt_param) {
  size_t longest = 0;
  for (const auto& pr : p->prompts) longest = std::max(longest, pr.size());
  const int64_t room = m.max_model_len - static_cast<int64_t>(longest);
  if (room <= 0 && p->params.max_tokens > 0)
    return api_error(400, "This model's maximum context length is " + std::to_string(m.max_model_len) +
                              " tokens. However, your prompt has " + std::to_string(longest) + " tokens.",
                     prompt_param, "context_length_exceeded");
  const Status st = p->params.validate(m.vocab_size);
  if (!st.ok()) return api_error(400, st.message(), leading_field(st.message()), "invalid_value");
  if (p->params.max_tokens > room)
    return api_error(400, "This model's maximum context length is " + std::to_string(m.max_model_len) +
                              " tokens. However, you requested " + std::to_string(longest + p->params.max_tokens) +
                              " tokens (" + std::to_string(longest) + " in the prompt, " +
                              std::to_string(p->params.max_tokens) + " for the completion).",
                     "max_tokens", "context_length_exceeded");
  return std::nullopt;
}

}  // namespace

ApiError api_error(int status, std::string message, std::string param, std::string code, std::string type) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  e.type = std::move(type);
  return e;
}

std::optional<ApiError> constrain_output(const ordered_json& b, const ForcedToolCalls& forced, ChatMode mode,
                                         const ServedModel& m, SamplingParams* params) {
  if (m.structured) return m.structured->apply(b, forced, mode, params);
  if (StructuredOutputs::asked(b, forced))
    return api_error(400, "structured outputs (response_format, guided_*, forced tool calls) are not available here",
                     "response_format");
  return std::nullopt;
}

std::optional<ApiError> check_model(const ordered_json& b, const ServedModel& m, std::string* name) {
  *name = m.name;
  if (!b.contains("model") || b["model"].is_null()) return std::nullopt;
  if (!b["model"].is_string()) return api_error(400, "model must be a string", "model", "invalid_type");
  *name = b["model"].get<std::string>();
  if (*name == m.name) return std::nullopt;
  return api_error(404, "The model `" + *name + "` does not exist. This server serves `" + m.name + "`.", "model",
                   "model_not_found");
}

std::string ApiError::to_json() const {
  ordered_json j = {{"error",
                     {{"message", message},
                      {"type", type},
                      {"param", param.empty() ? ordered_json() : ordered_json(param)},
                      {"code", code.empty() ? ordered_json() : ordered_json(code)}}}};
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

std::optional<ordered_json> parse_body(const std::string& body, ApiError* error) {
  try {
    ordered_json j = ordered_json::parse(body);
    if (!j.is_object()) {
      error->message = "the request body must be a JSON object";
      return std::nullopt;
    }
    return j;
  } catch (const std::exception& e) {
    error->message = std::string("the request body is not valid JSON: ") + e.what();
    return std::nullopt;
  }
}

PlanOrError plan_completion(const ordered_json& b, const ServedModel& m) {
  GenerationPlan p;
  if (auto e = read_common(b, m, &p)) return {std::nullopt, *e};
  if (!given(b, "prompt")) return fail("prompt is required", "prompt", "missing_required_parameter");
  const ordered_json& pr = b["prompt"];
  const Tokenizer& tok = *m.tokenizer;
  auto with_bos = [&](std::vector<int32_t> ids) {
    if (tok.add_bos() && tok.bos_id() >= 0 && (ids.empty() || ids[0] != tok.bos_id())) ids.insert(ids.begin(), tok.bos_id());
    return ids;
  };
  auto token_list = [&](const ordered_json& a, std::vector<int32_t>* out) {
    for (const auto& t : a) {
      if (!t.is_number_integer()) return false;
      const int64_t v = t.get<int64_t>();
      if (v < 0 || v >= m.vocab_size) return false;
      out->push_back(static_cast<int32_t>(v));
    }
    return true;
  };
  if (pr.is_string()) {
    p.prompts.push_back(with_bos(tok.encode(pr.get<std::string>())));
  } else if (pr.is_array() && !pr.empty() && pr[0].is_number_integer()) {
    std::vector<int32_t> ids;
    if (!token_list(pr, &ids)) return fail("prompt token ids must be integers in [0, " + std::to_string(m.vocab_size) + ")", "prompt");
    p.prompts.push_back(ids);
  } else if (pr.is_array() && !pr.empty()) {
    for (const auto& item : pr) {
      if (item.is_string()) {
        p.prompts.push_back(with_bos(tok.encode(item.get<std::string>())));
      } else if (item.is_array()) {
        std::vector<int32_t> ids;
        if (!token_list(item, &ids)) return fail("prompt token ids must be integers in [0, " + std::to_string(m.vocab_size) + ")", "prompt");
        p.prompts.push_back(ids);
      } else {
        return fail("prompt must be a string, an array of strings, or token ids", "prompt");
      }
    }
  } else {
    return fail("prompt must be a non-empty string, an array of strings, or token ids", "prompt");
  }
  if (p.prompts.size() > 64) return fail("at most 64 prompts per request", "prompt");
  for (const auto& ids : p.prompts)
    if (ids.empty()) return fail("a prompt is empty", "prompt");
  if (given(b, "echo")) {
    if (!b["echo"].is_boolean()) return fail("echo must be true or false", "echo", "invalid_type");
    p.echo = b["echo"].get<bool>();
  }
  if (given(b, "suffix")) return fail("suffix is not supported", "suffix", "unsupported_parameter");
  if (given(b, "best_of") && !(b["best_of"].is_number_integer() && b["best_of"].get<int64_t>() == p.n))
    return fail("best_of must equal n", "best_of");
  p.logprobs = p.params.logprobs;
  // echo with logprobs scores the prompt too (how evaluation harnesses
  // measure a continuation's likelihood); max_tokens 0 then only scores.
  if (p.echo && p.logprobs) p.params.prompt_logprobs = std::max(*p.logprobs, p.params.prompt_logprobs.value_or(0));
  if (!given(b, "max_tokens")) p.params.max_tokens = 16;  // OpenAI's completions default
  if (p.params.max_tokens == 0 && !p.echo)
    return fail("max_tokens must be at least 1 (0 only with echo, to score the prompt)", "max_tokens");
  if (auto e = constrain_output(b, {}, ChatMode::kChat, m, &p.params)) return fail(*e);
  if (auto e = check_params(&p, m, "prompt")) return fail(*e);
  return {p, {}};
}

std::optional<ApiError> render_chat(const ordered_json& b, ChatFormat format, ChatRender* out) {
  auto err = [](std::string message, std::string param, std::string code = "invalid_value") {
    return api_error(400, std::move(message), std::move(param), std::move(code));
  };
  if (!given(b, "messages") || !b["messages"].is_array() || b["messages"].empty())
    return err("messages must be a non-empty array", "messages", "missing_required_parameter");
  ordered_json messages = b["messages"];
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& msg = messages[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
      return err(at + " must be an object with a string role", "messages");
    const auto& c = msg.contains("content") ? msg["content"] : ordered_json();
    if (!(c.is_null() || c.is_string() || c.is_array()))
      return err(at + ".content must be a string or an array of parts", "messages");
    if (!c.is_array()) continue;
    for (size_t k = 0; k < c.size(); ++k) {
      const auto& part = c[k];
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
        return err(at + ".content parts must be objects with a type", "messages");
      const std::string type = part["type"].get<std::string>();
      if (type != "text")
        return err(at + ".content[" + std::to_string(k) + "] is a '" + type +
                       "' part; " + text_only_reason(format) + " (give text parts)",
                   "messages");
    }
  }
  // Thinking: reasoning_effort, or chat_template_kwargs.enable_thinking / thinking.
  ChatOptions o;
  o.format = format;
  if (given(b, "reasoning_effort")) {
    // V4.1 also takes a budget from 1 to 100 (a number or its text).
    const auto& e = b["reasoning_effort"];
    const bool budget = format == ChatFormat::kV41 && e.is_number_integer();
    if (!e.is_string() && !budget) return err("reasoning_effort must be a string", "reasoning_effort", "invalid_type");
    const std::string effort = budget ? std::to_string(e.get<int64_t>()) : e.get<std::string>();
    if (format == ChatFormat::kV41) {
      if (auto ok = v41_reasoning_budget(effort); !ok.ok()) return err(ok.status().message(), "reasoning_effort");
    } else if (effort != "low" && effort != "medium" && effort != "high" && effort != "max") {
      return err("reasoning_effort must be low, medium, high or max, got '" + effort + "'", "reasoning_effort");
    }
    o.mode = ChatMode::kThinking;
    o.reasoning_effort = effort;
  }
  if (given(b, "chat_template_kwargs")) {
    const auto& k = b["chat_template_kwargs"];
    if (!k.is_object()) return err("chat_template_kwargs must be an object", "chat_template_kwargs", "invalid_type");
    for (const char* key : {"enable_thinking", "thinking"}) {
      if (!k.contains(key)) continue;
      if (!k[key].is_boolean()) return err(std::string("chat_template_kwargs.") + key + " must be a boolean", "chat_template_kwargs");
      o.mode = k[key].get<bool>() ? ChatMode::kThinking : ChatMode::kChat;
    }
    if (k.contains("drop_thinking")) {
      if (!k["drop_thinking"].is_boolean()) return err("chat_template_kwargs.drop_thinking must be a boolean", "chat_template_kwargs");
      o.drop_thinking = k["drop_thinking"].get<bool>();
    }
  }
  for (const char* key : {"add_generation_prompt", "continue_final_message"})
    if (given(b, key) && !b[key].is_boolean()) return err(std::string(key) + " must be true or false", key, "invalid_type");
  o.add_generation_prompt = given(b, "add_generation_prompt") ? b["add_generation_prompt"].get<bool>() : true;
  if (given(b, "continue_final_message") && b["continue_final_message"].get<bool>()) {
    // vLLM's rule: the last (assistant) message is continued, not closed.
    if (o.add_generation_prompt && given(b, "add_generation_prompt"))
      return err("continue_final_message and add_generation_prompt cannot both be true", "continue_final_message");
    if (string_field(messages.back(), "role") != "assistant")
      return err("continue_final_message needs a final assistant message", "continue_final_message");
    o.add_generation_prompt = false;
    messages.back()["wo_eos"] = true;
  }
  // tool_choice: "none", "auto", "required", or {"type": "function",
  // "function": {"name": N}} naming one of the tools. "required" constrains
  // the reply to calls of the tools (constrain_output), a named function to
  // one call of it, the only tool offered.
  ordered_json tools = given(b, "tools") ? b["tools"] : ordered_json::array();
  if (!tools.is_array()) return err("tools must be an array", "tools", "invalid_type");
  for (const auto& t : tools)
    if (!t.is_object() || !t.contains("type") || t["type"] != "function" || !t.contains("function") || !t["function"].is_object() ||
        !t["function"].contains("name") || !t["function"]["name"].is_string())
      return err("each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}", "tools");
  std::string choice = tools.empty() ? "none" : "auto";
  if (given(b, "tool_choice")) {
    const auto& tc = b["tool_choice"];
    if (tc.is_string()) {
      choice = tc.get<std::string>();
      if (choice != "none" && choice != "auto" && choice != "required")
        return err("tool_choice must be \"none\", \"auto\", \"required\" or a named function, got \"" + choice + "\"", "tool_choice");
      if (choice == "required" && tools.empty()) return err("tool_choice \"required\" needs tools", "tool_choice");
    } else if (tc.is_object()) {
      const bool shaped = tc.contains("type") && tc["type"] == "function" && tc.contains("function") &&
                          tc["function"].is_object() && tc["function"].contains("name") && tc["function"]["name"].is_string();
      if (!shaped) return err("tool_choice must be {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice");
      const std::string name = tc["function"]["name"].get<std::string>();
      ordered_json named = ordered_json::array();
      for (const auto& t : tools)
        if (t["function"]["name"] == name) named.push_back(t);
      if (named.empty()) return err("tool_choice names function '" + name + "', which is not in tools", "tool_choice");
      tools = named;
      choice = "required";
      out->forced.parallel = false;
    } else {
      return err("tool_choice must be a string or an object", "tool_choice", "invalid_type");
    }
  }
  if (given(b, "parallel_tool_calls")) {
    if (!b["parallel_tool_calls"].is_boolean())
      return err("parallel_tool_calls must be true or false", "parallel_tool_calls", "invalid_type");
    if (!b["parallel_tool_calls"].get<bool>()) out->forced.parallel = false;
  }
  out->forced.tools = choice == "required" ? tools : ordered_json::array();
  out->parse_tools = false;
  if (!tools.empty() && choice != "none") {
    // Tools go on the first system or developer message (a system message
    // is added when there is none).
    if (string_field(messages[0], "role") == "system" || string_field(messages[0], "role") == "developer") {
      messages[0]["tools"] = tools;
    } else {
      messages.insert(messages.begin(), ordered_json{{"role", "system"}, {"content", ""}, {"tools", tools}});
    }
    out->parse_tools = true;
  }
  out->mode = o.mode;
  auto prompt = encode_chat(messages, o);
  if (!prompt.ok()) return err(prompt.status().message(), "messages");
  out->prompt = std::move(*prompt);
  return std::nullopt;
}

PlanOrError plan_chat(const ordered_json& b, const ServedModel& m) {
  GenerationPlan p;
  p.chat = true;
  if (auto e = read_common(b, m, &p)) return fail(*e);
  ChatRender rendered;
  if (auto e = render_chat(b, m.chat_format, &rendered)) return fail(*e);
  p.mode = rendered.mode;
  p.parse_tools = rendered.parse_tools;
  p.prompts.push_back(m.tokenizer->encode(rendered.prompt));
  if (auto e = constrain_output(b, rendered.forced, rendered.mode, m, &p.params)) return fail(*e);
  if (given(b, "top_logprobs") && !(b.contains("logprobs") && b["logprobs"].is_boolean() && b["logprobs"].get<bool>()))
    return fail("top_logprobs needs logprobs: true", "top_logprobs");
  p.logprobs = p.params.logprobs;
  if (given(b, "max_tokens") && given(b, "max_completion_tokens") && b["max_tokens"] != b["max_completion_tokens"])
    return fail("max_tokens and max_completion_tokens disagree; give one of them", "max_tokens");
  const bool max_given = given(b, "max_tokens") || given(b, "max_completion_tokens");
  if (p.params.max_tokens == 0 && max_given) return fail("max_tokens must be at least 1", "max_tokens");
  if (!max_given) {  // the room the prompt leaves
    const int64_t room = m.max_model_len - static_cast<int64_t>(p.prompts[0].size());
    p.params.max_tokens = std::max<int64_t>(room, 1);
  }
  if (auto e = check_params(&p, m, "messages")) return fail(*e);
  return {p, {}};
}

}  // namespace dsv4
