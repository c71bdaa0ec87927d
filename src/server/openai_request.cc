#include "server/openai_request.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;

PlanOrError fail(std::string message, std::string param = "", int status = 400) {
  PlanOrError r;
  r.error.status = status;
  r.error.message = std::move(message);
  r.error.param = std::move(param);
  return r;
}

// Common fields: model, n, stream, stream_options, sampling.
std::optional<ApiError> read_common(const ordered_json& b, const ServedModel& m, GenerationPlan* p) {
  auto err = [](std::string msg, std::string param, int status = 400) {
    ApiError e;
    e.status = status;
    e.message = std::move(msg);
    e.param = std::move(param);
    return e;
  };
  if (b.contains("model") && !b["model"].is_null()) {
    if (!b["model"].is_string()) return err("model must be a string", "model");
    p->model = b["model"].get<std::string>();
    if (p->model != m.name)
      return err("The model `" + p->model + "` does not exist. This server serves `" + m.name + "`.", "model", 404);
  } else {
    p->model = m.name;
  }
  if (b.contains("n") && !b["n"].is_null()) {
    if (!b["n"].is_number_integer()) return err("n must be an integer", "n");
    const int64_t n = b["n"].get<int64_t>();
    if (n < 1 || n > 16) return err("n must be between 1 and 16, got " + std::to_string(n), "n");
    p->n = static_cast<int>(n);
  }
  if (b.contains("stream") && !b["stream"].is_null()) {
    if (!b["stream"].is_boolean()) return err("stream must be true or false", "stream");
    p->stream = b["stream"].get<bool>();
  }
  if (b.contains("stream_options") && !b["stream_options"].is_null()) {
    const auto& so = b["stream_options"];
    if (!so.is_object()) return err("stream_options must be an object", "stream_options");
    if (so.contains("include_usage")) {
      if (!so["include_usage"].is_boolean()) return err("stream_options.include_usage must be a boolean", "stream_options");
      p->include_usage = so["include_usage"].get<bool>();
    }
  }
  auto params = SamplingParams::from_json(nlohmann::json::parse(b.dump()));
  if (!params.ok()) return err(params.status().message(), "");
  p->params = *params;
  return std::nullopt;
}

std::optional<ApiError> check_params(GenerationPlan* p, const ServedModel& m, bool max_tokens_given) {
  ApiError e;
  size_t longest = 0;
  for (const auto& pr : p->prompts) longest = std::max(longest, pr.size());
  const int64_t room = m.max_model_len - static_cast<int64_t>(longest);
  if (room <= 0) {
    e.message = "This model's maximum context length is " + std::to_string(m.max_model_len) +
                " tokens. However, your prompt has " + std::to_string(longest) + " tokens.";
    e.param = "messages";
    return e;
  }
  if (!max_tokens_given) p->params.max_tokens = room;
  const Status st = p->params.validate(m.vocab_size);
  if (!st.ok()) {
    e.message = st.message();
    return e;
  }
  if (p->params.max_tokens > room) {
    e.message = "This model's maximum context length is " + std::to_string(m.max_model_len) + " tokens. However, you requested " +
                std::to_string(longest + p->params.max_tokens) + " tokens (" + std::to_string(longest) +
                " in the prompt, " + std::to_string(p->params.max_tokens) + " for the completion).";
    e.param = "max_tokens";
    return e;
  }
  return std::nullopt;
}

bool given(const ordered_json& b, const char* k) { return b.contains(k) && !b[k].is_null(); }

}  // namespace

std::string ApiError::to_json() const {
  ordered_json j = {{"error",
                     {{"message", message},
                      {"type", type},
                      {"param", param.empty() ? ordered_json() : ordered_json(param)},
                      {"code", ordered_json()}}}};
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
  if (!given(b, "prompt")) return fail("prompt is required", "prompt");
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
    if (!b["echo"].is_boolean()) return fail("echo must be true or false", "echo");
    p.echo = b["echo"].get<bool>();
  }
  if (given(b, "suffix")) return fail("suffix is not supported", "suffix");
  if (given(b, "best_of") && !(b["best_of"].is_number_integer() && b["best_of"].get<int64_t>() == p.n))
    return fail("best_of must equal n", "best_of");
  p.logprobs = p.params.logprobs;
  if (!given(b, "max_tokens")) p.params.max_tokens = 16;  // OpenAI's completions default
  if (auto e = check_params(&p, m, true)) return {std::nullopt, *e};
  return {p, {}};
}

PlanOrError plan_chat(const ordered_json& b, const ServedModel& m) {
  GenerationPlan p;
  p.chat = true;
  if (auto e = read_common(b, m, &p)) return {std::nullopt, *e};
  if (!given(b, "messages") || !b["messages"].is_array() || b["messages"].empty())
    return fail("messages must be a non-empty array", "messages");
  ordered_json messages = b["messages"];
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& msg = messages[i];
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
      return fail("messages[" + std::to_string(i) + "] must be an object with a string role", "messages");
    const auto& c = msg.contains("content") ? msg["content"] : ordered_json();
    if (!(c.is_null() || c.is_string() || c.is_array()))
      return fail("messages[" + std::to_string(i) + "].content must be a string or an array of parts", "messages");
    if (c.is_array())
      for (const auto& part : c)
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
          return fail("messages[" + std::to_string(i) + "].content parts must be objects with a type", "messages");
  }
  // Thinking: reasoning_effort, or chat_template_kwargs.enable_thinking / thinking.
  ChatOptions o;
  if (given(b, "reasoning_effort")) {
    if (!b["reasoning_effort"].is_string()) return fail("reasoning_effort must be a string", "reasoning_effort");
    const std::string effort = b["reasoning_effort"].get<std::string>();
    if (effort != "low" && effort != "medium" && effort != "high" && effort != "max")
      return fail("reasoning_effort must be low, medium, high or max, got '" + effort + "'", "reasoning_effort");
    o.mode = ChatMode::kThinking;
    o.reasoning_effort = effort;
  }
  if (given(b, "chat_template_kwargs")) {
    const auto& k = b["chat_template_kwargs"];
    if (!k.is_object()) return fail("chat_template_kwargs must be an object", "chat_template_kwargs");
    for (const char* key : {"enable_thinking", "thinking"}) {
      if (!k.contains(key)) continue;
      if (!k[key].is_boolean()) return fail(std::string("chat_template_kwargs.") + key + " must be a boolean", "chat_template_kwargs");
      o.mode = k[key].get<bool>() ? ChatMode::kThinking : ChatMode::kChat;
    }
    if (k.contains("drop_thinking")) {
      if (!k["drop_thinking"].is_boolean()) return fail("chat_template_kwargs.drop_thinking must be a boolean", "chat_template_kwargs");
      o.drop_thinking = k["drop_thinking"].get<bool>();
    }
  }
  if (given(b, "response_format")) {
    const auto& rf = b["response_format"];
    const std::string type = rf.is_object() && rf.contains("type") && rf["type"].is_string() ? rf["type"].get<std::string>() : "";
    if (type != "text" && type != "json_object" && type != "json_schema")
      return fail("response_format.type must be text, json_object or json_schema", "response_format");
    if (type == "json_schema" && !(rf.contains("json_schema") && rf["json_schema"].is_object()))
      return fail("response_format json_schema needs a json_schema object", "response_format");
  }
  if (given(b, "tools")) {
    const auto& tools = b["tools"];
    if (!tools.is_array()) return fail("tools must be an array", "tools");
    for (const auto& t : tools)
      if (!t.is_object() || !t.contains("type") || t["type"] != "function" || !t.contains("function") || !t["function"].is_object() ||
          !t["function"].contains("name") || !t["function"]["name"].is_string())
        return fail("each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}", "tools");
    std::string choice = "auto";
    if (given(b, "tool_choice")) {
      if (b["tool_choice"].is_string()) choice = b["tool_choice"].get<std::string>();
      else if (!b["tool_choice"].is_object()) return fail("tool_choice must be a string or an object", "tool_choice");
    }
    if (!tools.empty() && choice != "none") {
      // Tools go on the first system or developer message (a system message
      // is added when there is none).
      if (messages[0].value("role", "") == "system" || messages[0].value("role", "") == "developer") {
        messages[0]["tools"] = tools;
      } else {
        messages.insert(messages.begin(), ordered_json{{"role", "system"}, {"content", ""}, {"tools", tools}});
      }
      p.parse_tools = true;
    }
  }
  p.mode = o.mode;
  auto prompt = encode_chat(messages, o);
  if (!prompt.ok()) return fail(prompt.status().message(), "messages");
  p.prompts.push_back(m.tokenizer->encode(*prompt));
  if (given(b, "top_logprobs") && !(b.contains("logprobs") && b["logprobs"].is_boolean() && b["logprobs"].get<bool>()))
    return fail("top_logprobs needs logprobs: true", "top_logprobs");
  p.logprobs = p.params.logprobs;
  if (given(b, "max_tokens") && given(b, "max_completion_tokens") && b["max_tokens"] != b["max_completion_tokens"])
    return fail("max_tokens and max_completion_tokens disagree; give one of them", "max_tokens");
  const bool max_given = given(b, "max_tokens") || given(b, "max_completion_tokens");
  if (auto e = check_params(&p, m, max_given)) return {std::nullopt, *e};
  return {p, {}};
}

}  // namespace dsv4
