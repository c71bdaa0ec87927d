#include "server/responses_api.h"

#include <cstring>

#include "server/request_json.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;

std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

ResponsePlanOrError fail(std::string message, std::string param, std::string code = "invalid_value", int status = 400) {
  ResponsePlanOrError r;
  r.error = api_error(status, std::move(message), std::move(param), std::move(code));
  return r;
}

// The text of a message's content: a string, or text parts (input_text,
// output_text, text); anything else is named in the error.
std::optional<std::string> content_text(const ordered_json& content, const std::string& at, ChatFormat format,
                                        std::string* error) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    *error = at + ".content must be a string or an array of content parts";
    return std::nullopt;
  }
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const auto& part = content[k];
    const std::string type = part.is_object() && part.contains("type") && part["type"].is_string() ? part["type"].get<std::string>() : "";
    const std::string where = at + ".content[" + std::to_string(k) + "]";
    if (type == "input_text" || type == "output_text" || type == "text" || type == "summary_text" || type == "reasoning_text") {
      if (!part.contains("text") || !part["text"].is_string()) {
        *error = where + ".text must be a string";
        return std::nullopt;
      }
      text += part["text"].get<std::string>();
    } else if (type == "refusal") {
      text += string_field(part, "refusal");
    } else {
      *error = where + (type.empty() ? " must be a content part with a type"
                                     : " is an '" + type + "' part; " + text_only_reason(format) + " (give input_text parts)");
      return std::nullopt;
    }
  }
  return text;
}

// Input items as chat messages, appended to *messages: an assistant turn
// gathers the reasoning, message and function calls that follow each other;
// a function_call_output is a tool message.
std::optional<std::string> items_to_messages(const ordered_json& items, ChatFormat format, ordered_json* messages,
                                             ordered_json* normalized) {
  long open_assistant = -1;  // index in *messages of the assistant turn being gathered
  auto assistant = [&]() -> ordered_json& {
    if (open_assistant < 0) {
      messages->push_back({{"role", "assistant"}, {"content", ""}});
      open_assistant = static_cast<long>(messages->size()) - 1;
    }
    return (*messages)[open_assistant];
  };
  for (size_t i = 0; i < items.size(); ++i) {
    const ordered_json& item = items[i];
    const std::string at = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) return at + " must be an object (a message or another input item)";
    std::string type = item.contains("type") && item["type"].is_string() ? item["type"].get<std::string>() : "";
    if (type.empty() && item.contains("role")) type = "message";
    std::string error;
    if (type == "message") {
      if (!item.contains("role") || !item["role"].is_string()) return at + ".role must be a string";
      const std::string role = item["role"].get<std::string>();
      if (role != "user" && role != "system" && role != "developer" && role != "assistant")
        return at + ".role must be user, system, developer or assistant, got '" + role + "'";
      if (!item.contains("content")) return at + " needs content";
      auto text = content_text(item["content"], at, format, &error);
      if (!text) return error;
      if (role == "assistant") {
        ordered_json& a = assistant();
        std::string c = a["content"].get<std::string>();
        a["content"] = c.empty() ? *text : c + "\n\n" + *text;
      } else {
        open_assistant = -1;
        messages->push_back({{"role", role}, {"content", *text}});
      }
    } else if (type == "reasoning") {
      std::string text;
      for (const char* key : {"content", "summary"}) {
        if (!item.contains(key) || !item[key].is_array() || !text.empty()) continue;
        auto t = content_text(item[key], at, format, &error);
        if (!t) return error;
        text = *t;
      }
      ordered_json& a = assistant();
      a["reasoning_content"] = string_field(a, "reasoning_content") + text;
    } else if (type == "function_call") {
      for (const char* key : {"call_id", "name", "arguments"})
        if (!item.contains(key) || !item[key].is_string()) return at + "." + key + " must be a string";
      ordered_json& a = assistant();
      if (!a.contains("tool_calls")) a["tool_calls"] = ordered_json::array();
      a["tool_calls"].push_back({{"id", item["call_id"]},
                                 {"type", "function"},
                                 {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string()) return at + ".call_id must be a string";
      if (!item.contains("output")) return at + " needs output";
      std::string output;
      if (item["output"].is_string()) {
        output = item["output"].get<std::string>();
      } else {
        auto t = content_text(item["output"], at + ".output", format, &error);
        if (!t) return error;
        output = *t;
      }
      open_assistant = -1;
      messages->push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", output}});
    } else if (type == "item_reference") {
      return at + " is an item_reference; give the items themselves, or previous_response_id";
    } else {
      return at + (type.empty() ? " has no type" : " is a '" + type + "' item, which this server does not take") +
             " (messages, function_call, function_call_output and reasoning are read)";
    }
    ordered_json n = item;
    if (!n.contains("type")) n["type"] = type;
    normalized->push_back(std::move(n));
  }
  return std::nullopt;
}

// Responses' function tools ({type, name, description, parameters,
// strict}) as chat's ({type, function: {...}}).
std::optional<std::string> convert_tools(const ordered_json& tools, ordered_json* out) {
  if (!tools.is_array()) return std::string("tools must be an array");
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& t = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    const std::string type = string_field(t, "type");
    if (type != "function")
      return at + (type.empty() ? " has no type" : " is a '" + type + "' tool") +
             "; this server runs function tools only ({\"type\": \"function\", \"name\": ...})";
    if (!t.contains("name") || !t["name"].is_string()) return at + ".name must be a string";
    ordered_json f = {{"name", t["name"]}};
    for (const char* key : {"description", "parameters", "strict"})
      if (given(t, key)) f[key] = t[key];
    out->push_back({{"type", "function"}, {"function", f}});
  }
  return std::nullopt;
}

std::string effort_of(const std::string& e) {
  if (e == "minimal" || e == "low") return "low";
  if (e == "medium") return "medium";
  if (e == "high") return "high";
  if (e == "xhigh") return "max";
  return "";
}

// plan_chat's parameter names as the Responses API calls them.
std::string responses_param(const std::string& p) {
  if (p == "messages") return "input";
  if (p == "max_tokens" || p == "max_completion_tokens") return "max_output_tokens";
  if (p == "response_format") return "text.format";
  if (p == "reasoning_effort") return "reasoning.effort";
  return p;
}

std::string status_of(const GenerationChoice& c) {
  if (!c.error.empty()) return "failed";
  if (c.finish_reason == "length") return "incomplete";
  if (c.finish_reason == "abort") return "cancelled";
  return "completed";
}

}  // namespace

void ResponseStore::put(const std::string& id, Entry entry) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it != entries_.end()) {
    it->second.first = std::move(entry);
    return;
  }
  order_.push_back(id);
  entries_.emplace(id, std::make_pair(std::move(entry), std::prev(order_.end())));
  while (entries_.size() > capacity_) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.first;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  order_.erase(it->second.second);
  entries_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

ApiError response_not_found(const std::string& id) {
  return api_error(404, "Response with id '" + id + "' not found (it was never stored, was deleted, or is older than the "
                        "responses this server keeps).",
                   "response_id", "response_not_found");
}

ordered_json input_items_list(const ResponseStore::Entry& e) {
  const ordered_json& items = e.input_items;
  return {{"object", "list"},
          {"data", items},
          {"first_id", items.empty() ? ordered_json() : items.front().value("id", ordered_json())},
          {"last_id", items.empty() ? ordered_json() : items.back().value("id", ordered_json())},
          {"has_more", false}};
}

ResponsePlanOrError plan_response(const ordered_json& b, const ServedModel& m, const ResponseStore& store) {
  if (given(b, "background") && !b["background"].is_boolean())
    return fail("background must be true or false", "background", "invalid_type");
  if (given(b, "background") && b["background"].get<bool>())
    return fail("background responses are not supported: give background false (or leave it out)", "background");
  for (const char* key : {"conversation", "prompt"})
    if (given(b, key))
      return fail(std::string(key) + " is not supported here (conversations and stored prompts live at OpenAI); "
                                     "chain turns with previous_response_id",
                  key, "unsupported_parameter");
  if (given(b, "top_logprobs") && !(b["top_logprobs"].is_number_integer() && b["top_logprobs"].get<int64_t>() == 0))
    return fail("top_logprobs is not supported on /v1/responses (chat completions gives logprobs)", "top_logprobs",
                "unsupported_parameter");
  ResponsePlan plan;
  plan.request = b;
  if (given(b, "store")) {
    if (!b["store"].is_boolean()) return fail("store must be true or false", "store", "invalid_type");
    plan.store = b["store"].get<bool>();
  }
  if (given(b, "metadata") && !b["metadata"].is_object()) return fail("metadata must be an object", "metadata", "invalid_type");
  ordered_json conversation = ordered_json::array();
  if (given(b, "previous_response_id")) {
    if (!b["previous_response_id"].is_string())
      return fail("previous_response_id must be a string", "previous_response_id", "invalid_type");
    const std::string prev = b["previous_response_id"].get<std::string>();
    auto entry = store.get(prev);
    if (!entry)
      return fail("Previous response with id '" + prev + "' not found (never stored, deleted, or older than the responses "
                  "this server keeps).",
                  "previous_response_id", "previous_response_not_found", 404);
    if (string_field(entry->response, "status") == "in_progress")
      return fail("Previous response with id '" + prev + "' is still in progress; wait for it to finish",
                  "previous_response_id");
    conversation = entry->conversation;
  }
  if (!given(b, "input")) return fail("input is required (a string, or an array of input items)", "input", "missing_required_parameter");
  ordered_json items = b["input"];
  if (items.is_string()) items = ordered_json::array({{{"role", "user"}, {"content", items}}});
  if (!items.is_array()) return fail("input must be a string or an array of input items", "input", "invalid_type");
  if (items.empty() && conversation.empty()) return fail("input is empty", "input");
  plan.input_items = ordered_json::array();
  if (auto e = items_to_messages(items, m.chat_format, &conversation, &plan.input_items)) return fail(*e, "input");
  for (size_t i = 0; i < plan.input_items.size(); ++i)
    if (!plan.input_items[i].contains("id")) plan.input_items[i]["id"] = "item_" + std::to_string(i);
  plan.conversation = conversation;

  ordered_json chat = ordered_json::object();
  if (given(b, "model")) chat["model"] = b["model"];
  ordered_json messages = ordered_json::array();
  if (given(b, "instructions")) {
    if (!b["instructions"].is_string()) return fail("instructions must be a string", "instructions", "invalid_type");
    messages.push_back({{"role", "system"}, {"content", b["instructions"]}});
  }
  for (const auto& msg : conversation) messages.push_back(msg);
  chat["messages"] = messages;
  if (given(b, "tools")) {
    ordered_json tools = ordered_json::array();
    if (auto e = convert_tools(b["tools"], &tools)) return fail(*e, "tools");
    if (!tools.empty()) chat["tools"] = tools;
  }
  if (given(b, "tool_choice")) {
    const auto& tc = b["tool_choice"];
    if (tc.is_string()) {
      chat["tool_choice"] = tc;
    } else if (tc.is_object() && string_field(tc, "type") == "function" && tc.contains("name") && tc["name"].is_string()) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
    } else {
      return fail("tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}",
                  "tool_choice");
    }
    if (tc.is_string() && tc != "none" && !chat.contains("tools") && tc != "auto")
      return fail("tool_choice \"" + tc.get<std::string>() + "\" needs function tools", "tool_choice");
  }
  if (given(b, "parallel_tool_calls")) chat["parallel_tool_calls"] = b["parallel_tool_calls"];
  if (given(b, "reasoning")) {
    const auto& r = b["reasoning"];
    if (!r.is_object()) return fail("reasoning must be an object ({\"effort\": ...})", "reasoning", "invalid_type");
    if (given(r, "effort")) {
      if (!r["effort"].is_string()) return fail("reasoning.effort must be a string", "reasoning.effort", "invalid_type");
      const std::string e = r["effort"].get<std::string>();
      if (e != "none" && effort_of(e).empty())
        return fail("reasoning.effort must be none, minimal, low, medium, high or xhigh, got '" + e + "'", "reasoning.effort");
      // V4.1 knows xhigh itself (a budget of 75) and has no medium (a 400
      // naming what it takes, from the chat renderer).
      if (e != "none")
        chat["reasoning_effort"] = m.chat_format == ChatFormat::kV41 && (e == "xhigh" || e == "medium") ? e : effort_of(e);
    }
  }
  if (given(b, "text")) {
    const auto& t = b["text"];
    if (!t.is_object()) return fail("text must be an object ({\"format\": ...})", "text", "invalid_type");
    if (given(t, "format")) {
      const auto& f = t["format"];
      const std::string type = string_field(f, "type");
      if (type == "json_schema") {
        ordered_json js = {{"name", string_field(f, "name", "response")}};
        for (const char* key : {"schema", "strict", "description"})
          if (given(f, key)) js[key] = f[key];
        chat["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
      } else if (type == "json_object") {
        chat["response_format"] = {{"type", "json_object"}};
      } else if (type != "text") {
        return fail("text.format.type must be text, json_object or json_schema", "text.format");
      }
    }
  }
  if (given(b, "max_output_tokens")) chat["max_tokens"] = b["max_output_tokens"];
  for (const char* key : {"temperature", "top_p", "stream"})
    if (given(b, key)) chat[key] = b[key];

  PlanOrError planned = plan_chat(chat, m);
  if (!planned.plan) {
    ResponsePlanOrError r;
    r.error = planned.error;
    r.error.param = responses_param(r.error.param);
    for (const auto& [from, to] : {std::pair<const char*, const char*>{"max_tokens", "max_output_tokens"},
                                   {"messages", "input"},
                                   {"response_format", "text.format"}}) {
      size_t at = r.error.message.find(from);
      if (at != std::string::npos && r.error.message.find(to) == std::string::npos) r.error.message.replace(at, std::strlen(from), to);
    }
    return r;
  }
  plan.generation = std::move(*planned.plan);
  ResponsePlanOrError r;
  r.plan = std::move(plan);
  return r;
}

ResponsesFormat::ResponsesFormat(std::shared_ptr<const ResponsePlan> plan, std::string id, int64_t created,
                                 const Generation& gen, ResponseStore* store)
    : plan_(std::move(plan)), id_(std::move(id)), created_(created), gen_(gen), store_(store) {
  suffix_ = id_.substr(id_.find('_') + 1);
  save(false);
}

ResponsesFormat::~ResponsesFormat() {
  // A response its client left is kept as it ended (cancelled).
  if (!saved_done_) save(true);
}

ordered_json ResponsesFormat::output() const {
  const GenerationChoice& c = gen_.choice(0);
  ordered_json out = ordered_json::array();
  const std::string& reasoning = c.text->reasoning();
  if (plan_->generation.mode == ChatMode::kThinking && !reasoning.empty())
    out.push_back({{"type", "reasoning"},
                   {"id", "rs_" + suffix_},
                   {"summary", ordered_json::array()},
                   {"content", ordered_json::array({{{"type", "reasoning_text"}, {"text", reasoning}}})}});
  const auto& calls = c.text->tool_calls();
  if (!c.text->content().empty() || calls.empty())
    out.push_back({{"type", "message"},
                   {"id", "msg_" + suffix_},
                   {"status", c.finished ? (status_of(c) == "completed" ? "completed" : "incomplete") : "in_progress"},
                   {"role", "assistant"},
                   {"content", ordered_json::array({{{"type", "output_text"},
                                                     {"text", c.text->content()},
                                                     {"annotations", ordered_json::array()},
                                                     {"logprobs", ordered_json::array()}}})}});
  for (size_t k = 0; k < calls.size(); ++k)
    out.push_back({{"type", "function_call"},
                   {"id", "fc_" + suffix_ + "_" + std::to_string(k)},
                   {"call_id", "call_" + suffix_ + "_" + std::to_string(k)},
                   {"name", calls[k].name},
                   {"arguments", calls[k].arguments},
                   {"status", "completed"}});
  return out;
}

ordered_json ResponsesFormat::object(bool done) const {
  const ordered_json& q = plan_->request;
  const GenerationChoice& c = gen_.choice(0);
  const std::string status = done ? status_of(c) : "in_progress";
  auto echo = [&](const char* key, ordered_json fallback) { return given(q, key) ? q[key] : fallback; };
  ordered_json reasoning = {{"effort", nullptr}, {"summary", nullptr}};
  if (given(q, "reasoning") && q["reasoning"].is_object() && given(q["reasoning"], "effort"))
    reasoning["effort"] = q["reasoning"]["effort"];
  ordered_json text = {{"format", {{"type", "text"}}}};
  if (given(q, "text") && q["text"].is_object() && given(q["text"], "format")) text["format"] = q["text"]["format"];
  ordered_json usage = nullptr;
  if (done) {
    const Usage u = gen_.usage();
    usage = {{"input_tokens", u.prompt_tokens},
             {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
             {"output_tokens", u.completion_tokens},
             {"output_tokens_details", {{"reasoning_tokens", c.reasoning_tokens}}},
             {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  }
  ordered_json o = {{"id", id_},
                    {"object", "response"},
                    {"created_at", created_},
                    {"status", status},
                    {"background", false},
                    {"error", nullptr},
                    {"incomplete_details", nullptr},
                    {"instructions", echo("instructions", nullptr)},
                    {"max_output_tokens", echo("max_output_tokens", nullptr)},
                    {"max_tool_calls", nullptr},
                    {"model", plan_->generation.model},
                    {"output", done ? output() : ordered_json::array()},
                    {"parallel_tool_calls", echo("parallel_tool_calls", true)},
                    {"previous_response_id", echo("previous_response_id", nullptr)},
                    {"reasoning", reasoning},
                    {"service_tier", "default"},
                    {"store", plan_->store},
                    {"temperature", echo("temperature", 1.0)},
                    {"text", text},
                    {"tool_choice", echo("tool_choice", "auto")},
                    {"tools", echo("tools", ordered_json::array())},
                    {"top_logprobs", 0},
                    {"top_p", echo("top_p", 1.0)},
                    {"truncation", echo("truncation", "disabled")},
                    {"usage", usage},
                    {"user", echo("user", nullptr)},
                    {"metadata", echo("metadata", ordered_json::object())}};
  if (status == "incomplete") o["incomplete_details"] = {{"reason", "max_output_tokens"}};
  if (status == "failed") o["error"] = {{"code", "server_error"}, {"message", c.error}};
  return o;
}

void ResponsesFormat::save(bool done) {
  if (!plan_->store || !store_) return;
  ResponseStore::Entry e;
  e.response = object(done);
  e.input_items = plan_->input_items;
  e.conversation = plan_->conversation;
  if (done) {
    saved_done_ = true;
    const GenerationChoice& c = gen_.choice(0);
    ordered_json a = {{"role", "assistant"}, {"content", c.text->content()}};
    if (!c.text->reasoning().empty()) a["reasoning_content"] = c.text->reasoning();
    if (!c.text->tool_calls().empty()) {
      a["tool_calls"] = ordered_json::array();
      for (size_t k = 0; k < c.text->tool_calls().size(); ++k)
        a["tool_calls"].push_back({{"id", "call_" + suffix_ + "_" + std::to_string(k)},
                                   {"type", "function"},
                                   {"function",
                                    {{"name", c.text->tool_calls()[k].name}, {"arguments", c.text->tool_calls()[k].arguments}}}});
    }
    e.conversation.push_back(std::move(a));
  }
  store_->put(id_, std::move(e));
}

std::string ResponsesFormat::event(const char* type, ordered_json data) {
  ordered_json e = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [k, v] : data.items()) e[k] = std::move(v);
  return std::string("event: ") + type + "\ndata: " + dump(e) + "\n\n";
}

std::vector<std::string> ResponsesFormat::begin() {
  const ordered_json o = object(false);
  return {event("response.created", {{"response", o}}), event("response.in_progress", {{"response", o}})};
}

void ResponsesFormat::open(Item item, std::vector<std::string>* out) {
  if (open_ == item) return;
  close(out);
  open_ = item;
  ++output_index_;
  if (item == Item::kReasoning) {
    out->push_back(event("response.output_item.added",
                         {{"output_index", output_index_},
                          {"item", {{"type", "reasoning"}, {"id", "rs_" + suffix_}, {"summary", ordered_json::array()},
                                    {"content", ordered_json::array()}}}}));
    out->push_back(event("response.content_part.added", {{"item_id", "rs_" + suffix_},
                                                         {"output_index", output_index_},
                                                         {"content_index", 0},
                                                         {"part", {{"type", "reasoning_text"}, {"text", ""}}}}));
  } else {
    out->push_back(event("response.output_item.added",
                         {{"output_index", output_index_},
                          {"item", {{"type", "message"}, {"id", "msg_" + suffix_}, {"status", "in_progress"},
                                    {"role", "assistant"}, {"content", ordered_json::array()}}}}));
    out->push_back(event("response.content_part.added",
                         {{"item_id", "msg_" + suffix_},
                          {"output_index", output_index_},
                          {"content_index", 0},
                          {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", ordered_json::array()},
                                    {"logprobs", ordered_json::array()}}}}));
  }
}

void ResponsesFormat::close(std::vector<std::string>* out) {
  if (open_ == Item::kNone) return;
  if (open_ == Item::kReasoning) {
    const std::string item_id = "rs_" + suffix_;
    const ordered_json part = {{"type", "reasoning_text"}, {"text", reasoning_}};
    out->push_back(event("response.reasoning_text.done",
                         {{"item_id", item_id}, {"output_index", output_index_}, {"content_index", 0}, {"text", reasoning_}}));
    out->push_back(event("response.content_part.done",
                         {{"item_id", item_id}, {"output_index", output_index_}, {"content_index", 0}, {"part", part}}));
    out->push_back(event("response.output_item.done",
                         {{"output_index", output_index_},
                          {"item", {{"type", "reasoning"}, {"id", item_id}, {"summary", ordered_json::array()},
                                    {"content", ordered_json::array({part})}}}}));
  } else {
    const std::string item_id = "msg_" + suffix_;
    const ordered_json part = {{"type", "output_text"}, {"text", content_}, {"annotations", ordered_json::array()},
                               {"logprobs", ordered_json::array()}};
    out->push_back(event("response.output_text.done", {{"item_id", item_id}, {"output_index", output_index_},
                                                       {"content_index", 0}, {"text", content_},
                                                       {"logprobs", ordered_json::array()}}));
    out->push_back(event("response.content_part.done",
                         {{"item_id", item_id}, {"output_index", output_index_}, {"content_index", 0}, {"part", part}}));
    const GenerationChoice& c = gen_.choice(0);
    out->push_back(event("response.output_item.done",
                         {{"output_index", output_index_},
                          {"item", {{"type", "message"}, {"id", item_id},
                                    {"status", status_of(c) == "completed" ? "completed" : "incomplete"},
                                    {"role", "assistant"}, {"content", ordered_json::array({part})}}}}));
  }
  open_ = Item::kNone;
}

std::vector<std::string> ResponsesFormat::update(const ChoiceUpdate& u) {
  std::vector<std::string> out;
  if (!u.delta.reasoning.empty()) {
    open(Item::kReasoning, &out);
    reasoning_ += u.delta.reasoning;
    out.push_back(event("response.reasoning_text.delta", {{"item_id", "rs_" + suffix_},
                                                           {"output_index", output_index_},
                                                           {"content_index", 0},
                                                           {"delta", u.delta.reasoning}}));
  }
  if (!u.delta.content.empty()) {
    open(Item::kMessage, &out);
    content_ += u.delta.content;
    out.push_back(event("response.output_text.delta", {{"item_id", "msg_" + suffix_},
                                                        {"output_index", output_index_},
                                                        {"content_index", 0},
                                                        {"delta", u.delta.content},
                                                        {"logprobs", ordered_json::array()}}));
  }
  return out;
}

std::vector<std::string> ResponsesFormat::end() {
  std::vector<std::string> out;
  const GenerationChoice& c = gen_.choice(0);
  const auto& calls = c.text->tool_calls();
  // A reply with neither text nor calls still has its (empty) message.
  if (open_ != Item::kMessage && content_.empty() && calls.empty()) open(Item::kMessage, &out);
  close(&out);
  for (size_t k = 0; k < calls.size(); ++k) {
    ++output_index_;
    const std::string item_id = "fc_" + suffix_ + "_" + std::to_string(k);
    ordered_json item = {{"type", "function_call"}, {"id", item_id}, {"call_id", "call_" + suffix_ + "_" + std::to_string(k)},
                         {"name", calls[k].name}, {"arguments", ""}, {"status", "in_progress"}};
    out.push_back(event("response.output_item.added", {{"output_index", output_index_}, {"item", item}}));
    out.push_back(event("response.function_call_arguments.delta",
                        {{"item_id", item_id}, {"output_index", output_index_}, {"delta", calls[k].arguments}}));
    out.push_back(event("response.function_call_arguments.done", {{"item_id", item_id},
                                                                   {"output_index", output_index_},
                                                                   {"name", calls[k].name},
                                                                   {"arguments", calls[k].arguments}}));
    item["arguments"] = calls[k].arguments;
    item["status"] = "completed";
    out.push_back(event("response.output_item.done", {{"output_index", output_index_}, {"item", item}}));
  }
  const ordered_json o = object(true);
  const std::string status = o["status"].get<std::string>();
  const char* type = status == "completed"    ? "response.completed"
                     : status == "incomplete" ? "response.incomplete"
                                              : "response.failed";
  out.push_back(event(type, {{"response", o}}));
  save(true);
  return out;
}

std::string ResponsesFormat::body() {
  save(true);
  return dump(object(true));
}

}  // namespace dsv4
