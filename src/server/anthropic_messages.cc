#include "server/anthropic_messages.h"

#include "server/request_json.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;

std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

PlanOrError fail(std::string message, std::string param = "") {
  return {std::nullopt, api_error(400, std::move(message), std::move(param), "invalid_value")};
}

// Text of a string or an array of text blocks; other blocks are an error.
std::optional<std::string> block_text(const ordered_json& content, const std::string& at, ChatFormat format,
                                      std::string* error) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return std::string();
  if (!content.is_array()) {
    *error = at + " must be a string or an array of text blocks";
    return std::nullopt;
  }
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const auto& block = content[k];
    const std::string type = string_field(block, "type");
    if (type != "text" || !block.contains("text") || !block["text"].is_string()) {
      *error = at + "[" + std::to_string(k) + "] is a '" + type + "' block; only text blocks are read here (" + text_only_reason(format) + ")";
      return std::nullopt;
    }
    if (!text.empty()) text += "\n\n";
    text += block["text"].get<std::string>();
  }
  return text;
}

// An Anthropic message as OpenAI-style chat messages (what encode_chat reads).
std::optional<std::string> convert_message(const ordered_json& m, size_t i, ChatFormat format, ordered_json* out) {
  const std::string at = "messages[" + std::to_string(i) + "]";
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) return at + " must be an object with a role";
  const std::string role = m["role"].get<std::string>();
  if (role != "user" && role != "assistant") return at + ".role must be user or assistant, got '" + role + "'";
  if (!m.contains("content")) return at + " needs content";
  const ordered_json& content = m["content"];
  if (content.is_string()) {
    out->push_back({{"role", role}, {"content", content}});
    return std::nullopt;
  }
  if (!content.is_array()) return at + ".content must be a string or an array of blocks";
  std::string text, thinking;
  ordered_json calls = ordered_json::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const auto& block = content[k];
    const std::string where = at + ".content[" + std::to_string(k) + "]";
    if (!block.is_object() || !block.contains("type") || !block["type"].is_string()) return where + " must be a block with a type";
    const std::string type = block["type"].get<std::string>();
    if (type == "text") {
      if (!block.contains("text") || !block["text"].is_string()) return where + ".text must be a string";
      if (!text.empty()) text += "\n\n";
      text += block["text"].get<std::string>();
    } else if (type == "thinking" && role == "assistant") {
      thinking += string_field(block, "thinking");
    } else if (type == "redacted_thinking" && role == "assistant") {
      // Nothing readable to give the model back.
    } else if (type == "tool_use" && role == "assistant") {
      if (!block.contains("name") || !block["name"].is_string()) return where + ".name must be a string";
      const ordered_json input = block.contains("input") ? block["input"] : ordered_json::object();
      calls.push_back({{"id", string_field(block, "id")}, {"type", "function"},
                       {"function", {{"name", block["name"]}, {"arguments", dump(input)}}}});
    } else if (type == "tool_result" && role == "user") {
      std::string error;
      auto result = block_text(block.contains("content") ? block["content"] : ordered_json(), where + ".content", format, &error);
      if (!result) return error;
      out->push_back({{"role", "tool"}, {"tool_call_id", string_field(block, "tool_use_id")}, {"content", *result}});
    } else {
      return where + " is a '" + type + "' block, which a " + role + " message cannot carry here" +
             (type == "image" || type == "document" ? " (" + std::string(text_only_reason(format)) + ")" : "");
    }
  }
  if (role == "assistant") {
    ordered_json msg = {{"role", "assistant"}, {"content", text}};
    if (!thinking.empty()) msg["reasoning_content"] = thinking;
    if (!calls.empty()) msg["tool_calls"] = calls;
    out->push_back(msg);
  } else if (!text.empty()) {
    out->push_back({{"role", "user"}, {"content", text}});
  }
  return std::nullopt;
}

const char* stop_reason(const GenerationChoice& c) {
  if (!c.text->tool_calls().empty()) return "tool_use";
  if (c.text->stopped()) return "stop_sequence";
  if (c.finish_reason == "length") return "max_tokens";
  return "end_turn";
}

ordered_json stop_sequence(const GenerationChoice& c) {
  return c.text->stopped() ? ordered_json(c.text->stop_string()) : ordered_json();
}

std::string tool_use_id(const std::string& id, size_t k) { return "toolu_" + id.substr(4) + "_" + std::to_string(k); }

ordered_json tool_input(const ParsedToolCall& t) {
  try {
    ordered_json j = ordered_json::parse(t.arguments);
    if (j.is_object()) return j;
  } catch (const std::exception&) {
  }
  return ordered_json::object();
}

std::string event(const char* name, const ordered_json& data) {
  return std::string("event: ") + name + "\ndata: " + dump(data) + "\n\n";
}

}  // namespace

PlanOrError plan_messages(const ordered_json& b, const ServedModel& m) {
  GenerationPlan p;
  p.chat = true;
  // Any model name is served (coding agents send their own; DeepSeek's
  // Anthropic endpoint maps them the same way); the reply echoes it.
  p.model = m.name;
  if (given(b, "model")) {
    if (!b["model"].is_string()) return fail("model must be a string", "model");
    p.model = b["model"].get<std::string>();
  }
  if (!given(b, "max_tokens") || !b["max_tokens"].is_number_integer() || b["max_tokens"].get<int64_t>() < 1)
    return fail("max_tokens is required: a positive integer", "max_tokens");
  if (!given(b, "messages") || !b["messages"].is_array() || b["messages"].empty())
    return fail("messages must be a non-empty array", "messages");
  if (given(b, "stream")) {
    if (!b["stream"].is_boolean()) return fail("stream must be true or false", "stream");
    p.stream = b["stream"].get<bool>();
  }
  ordered_json chat = {{"messages", ordered_json::array()}};
  ordered_json& messages = chat["messages"];
  if (given(b, "system")) {
    std::string error;
    auto system = block_text(b["system"], "system", m.chat_format, &error);
    if (!system) return fail(error, "system");
    messages.push_back({{"role", "system"}, {"content", *system}});
  }
  for (size_t i = 0; i < b["messages"].size(); ++i)
    if (auto error = convert_message(b["messages"][i], i, m.chat_format, &messages)) return fail(*error, "messages");
  if (given(b, "tools")) {
    if (!b["tools"].is_array()) return fail("tools must be an array", "tools");
    ordered_json tools = ordered_json::array();
    for (const auto& t : b["tools"]) {
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) return fail("each tool needs a name", "tools");
      ordered_json fn = {{"name", t["name"]}};
      if (t.contains("description")) fn["description"] = t["description"];
      fn["parameters"] = t.contains("input_schema") ? t["input_schema"] : ordered_json::object();
      tools.push_back({{"type", "function"}, {"function", fn}});
    }
    chat["tools"] = tools;
  }
  if (given(b, "tool_choice")) {
    const auto& tc = b["tool_choice"];
    const std::string type = string_field(tc, "type");
    if (type == "auto") chat["tool_choice"] = "auto";
    else if (type == "any") chat["tool_choice"] = "required";
    else if (type == "none") chat["tool_choice"] = "none";
    else if (type == "tool" && tc.contains("name") && tc["name"].is_string())
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
    else return fail("tool_choice must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": ...}", "tool_choice");
    if (tc.contains("disable_parallel_tool_use")) {
      if (!tc["disable_parallel_tool_use"].is_boolean()) return fail("tool_choice.disable_parallel_tool_use must be a boolean", "tool_choice");
      chat["parallel_tool_calls"] = !tc["disable_parallel_tool_use"].get<bool>();
    }
  }
  if (given(b, "thinking")) {
    const auto& t = b["thinking"];
    const std::string type = string_field(t, "type");
    if (type != "enabled" && type != "disabled") return fail("thinking.type must be enabled or disabled", "thinking");
    chat["chat_template_kwargs"] = {{"thinking", type == "enabled"}};
  }
  ChatRender rendered;
  if (auto e = render_chat(chat, m.chat_format, &rendered)) return {std::nullopt, *e};
  p.mode = rendered.mode;
  p.parse_tools = rendered.parse_tools;
  p.prompts.push_back(m.tokenizer->encode(rendered.prompt));
  // Sampling: Anthropic's names over the same parameters.
  nlohmann::json s = {{"max_tokens", b["max_tokens"]}};
  for (const char* k : {"temperature", "top_p", "top_k"})
    if (given(b, k)) s[k] = b[k];
  if (given(b, "stop_sequences")) s["stop"] = b["stop_sequences"];
  auto params = SamplingParams::from_json(s);
  if (!params.ok()) {
    const std::string msg = params.status().message();
    return fail(msg.rfind("stop", 0) == 0 ? "stop_sequences must be an array of non-empty strings" : msg,
                msg.rfind("stop", 0) == 0 ? "stop_sequences" : "");
  }
  p.params = *params;
  // tool_choice any / tool forces a call (the chat body carries them).
  if (auto e = constrain_output(chat, rendered.forced, rendered.mode, m, &p.params)) return {std::nullopt, *e};
  const int64_t prompt = static_cast<int64_t>(p.prompts[0].size());
  if (prompt + p.params.max_tokens > m.max_model_len)
    return {std::nullopt, api_error(400, "prompt is too long: " + std::to_string(prompt) + " tokens + max_tokens " +
                                             std::to_string(p.params.max_tokens) + " > " +
                                             std::to_string(m.max_model_len) + " maximum",
                                    "max_tokens", "context_length_exceeded")};
  const Status st = p.params.validate(m.vocab_size);
  if (!st.ok()) return fail(st.message());
  return {p, {}};
}

std::string anthropic_error_json(const ApiError& e) {
  const char* type = e.status == 401   ? "authentication_error"
                     : e.status == 403 ? "permission_error"
                     : e.status == 404 ? "not_found_error"
                     : e.status == 413 ? "request_too_large"
                     : e.status == 429 ? "rate_limit_error"
                     : e.status == 503 || e.status == 529 ? "overloaded_error"
                     : e.status >= 500 ? "api_error"
                                       : "invalid_request_error";
  return dump({{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}});
}

ordered_json anthropic_body(const std::string& id, const GenerationPlan& plan, const Generation& gen) {
  const GenerationChoice& c = gen.choice(0);
  ordered_json content = ordered_json::array();
  if (plan.mode == ChatMode::kThinking && !c.text->reasoning().empty())
    content.push_back({{"type", "thinking"}, {"thinking", c.text->reasoning()}, {"signature", ""}});
  if (!c.text->content().empty()) content.push_back({{"type", "text"}, {"text", c.text->content()}});
  for (size_t k = 0; k < c.text->tool_calls().size(); ++k) {
    const ParsedToolCall& t = c.text->tool_calls()[k];
    content.push_back({{"type", "tool_use"}, {"id", tool_use_id(id, k)}, {"name", t.name}, {"input", tool_input(t)}});
  }
  const Usage u = gen.usage();
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", plan.model},
          {"content", content},
          {"stop_reason", stop_reason(c)},
          {"stop_sequence", stop_sequence(c)},
          {"usage",
           {{"input_tokens", u.prompt_tokens - u.cached_tokens},
            {"cache_read_input_tokens", u.cached_tokens},
            {"output_tokens", u.completion_tokens}}}};
}

AnthropicStream::AnthropicStream(std::string id, const GenerationPlan& plan, const Generation& gen)
    : id_(std::move(id)), plan_(plan), gen_(gen) {}

std::vector<std::string> AnthropicStream::begin() {
  const Usage u = gen_.usage();
  ordered_json message = {{"id", id_},
                          {"type", "message"},
                          {"role", "assistant"},
                          {"model", plan_.model},
                          {"content", ordered_json::array()},
                          {"stop_reason", nullptr},
                          {"stop_sequence", nullptr},
                          {"usage", {{"input_tokens", u.prompt_tokens}, {"output_tokens", 0}}}};
  return {event("message_start", {{"type", "message_start"}, {"message", message}}),
          event("ping", {{"type", "ping"}})};
}

void AnthropicStream::open(Block b, std::vector<std::string>* out) {
  if (block_ == b) return;
  close(out);
  block_ = b;
  ++index_;
  const ordered_json block = b == Block::kThinking ? ordered_json{{"type", "thinking"}, {"thinking", ""}}
                                                   : ordered_json{{"type", "text"}, {"text", ""}};
  out->push_back(event("content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}}));
}

void AnthropicStream::close(std::vector<std::string>* out) {
  if (block_ == Block::kNone) return;
  if (block_ == Block::kThinking)
    out->push_back(event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_},
                                                 {"delta", {{"type", "signature_delta"}, {"signature", ""}}}}));
  out->push_back(event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}}));
  block_ = Block::kNone;
}

std::vector<std::string> AnthropicStream::update(const ChoiceUpdate& u) {
  std::vector<std::string> out;
  if (!u.delta.reasoning.empty()) {
    open(Block::kThinking, &out);
    out.push_back(event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_},
                                                {"delta", {{"type", "thinking_delta"}, {"thinking", u.delta.reasoning}}}}));
  }
  if (!u.delta.content.empty()) {
    open(Block::kText, &out);
    out.push_back(event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_},
                                                {"delta", {{"type", "text_delta"}, {"text", u.delta.content}}}}));
  }
  return out;
}

std::vector<std::string> AnthropicStream::end() {
  std::vector<std::string> out;
  close(&out);
  const GenerationChoice& c = gen_.choice(0);
  for (size_t k = 0; k < c.text->tool_calls().size(); ++k) {
    const ParsedToolCall& t = c.text->tool_calls()[k];
    ++index_;
    out.push_back(event("content_block_start",
                        {{"type", "content_block_start"}, {"index", index_},
                         {"content_block", {{"type", "tool_use"}, {"id", tool_use_id(id_, k)}, {"name", t.name}, {"input", ordered_json::object()}}}}));
    out.push_back(event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_},
                                                {"delta", {{"type", "input_json_delta"}, {"partial_json", dump(tool_input(t))}}}}));
    out.push_back(event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}}));
  }
  const Usage u = gen_.usage();
  out.push_back(event("message_delta", {{"type", "message_delta"},
                                        {"delta", {{"stop_reason", stop_reason(c)}, {"stop_sequence", stop_sequence(c)}}},
                                        {"usage", {{"output_tokens", u.completion_tokens}}}}));
  out.push_back(event("message_stop", {{"type", "message_stop"}}));
  return out;
}

}  // namespace dsv4
