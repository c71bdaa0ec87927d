#include "tokenizer/chat_encoding.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <regex>

namespace dsv4 {
namespace {

using nlohmann::ordered_json;
using namespace chat_tokens;

// The tools section, its DSML spelt with the format's tags.
std::string tools_template(const DsmlTags& t) {
  const std::string calls = t.open(t.calls) + ">", invoke = t.open(t.invoke), param = t.open(t.parameter);
  return "## Tools\n\n"
         "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
         "\"" + calls + "\" block like the following:\n\n" +
         calls + "\n" +
         invoke + " name=\"$TOOL_NAME\">\n" +
         param + " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE" + t.close(t.parameter) + "\n"
         "...\n" +
         t.close(t.invoke) + "\n" +
         invoke + " name=\"$TOOL_NAME2\">\n"
         "...\n" +
         t.close(t.invoke) + "\n" +
         t.close(t.calls) + "\n\n"
         "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, booleans, "
         "arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
         "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
         "<think>...</think> BEFORE any tool calls or final response.\n\n"
         "Otherwise, output directly after </think> with tool calls or final response.\n\n"
         "### Available Tool Schemas\n\n";
}
constexpr char kToolsTail[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
constexpr char kResponseFormat[] =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";
constexpr char kMaxEffort[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, "
    "rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";
constexpr char kV41EffortTemplate[] =
    "Reasoning Effort: %d (range 1-100, the higher the value, the more thorough the reasoning)\n\n";

const std::map<std::string, std::string>& task_tokens() {
  static const std::map<std::string, std::string> t = {
      {"action", "<｜action｜>"}, {"query", "<｜query｜>"},       {"authority", "<｜authority｜>"},
      {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"},       {"read_url", "<｜read_url｜>"}};
  return t;
}

std::string str(const ordered_json& m, const char* key) {
  auto it = m.find(key);
  if (it == m.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  return python_json_dumps(*it);
}

// A string field, or `fallback` when it is missing or not a string.
std::string string_or(const ordered_json& m, const char* key, const std::string& fallback) {
  auto it = m.find(key);
  return it != m.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// Python's truth value of a field (the reference encoder tests flags with
// `if message.get(key)`): missing, null, false, 0 and empty are false.
bool truthy(const ordered_json& m, const char* key) {
  auto it = m.find(key);
  if (it == m.end() || it->is_null()) return false;
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_number()) return it->get<double>() != 0.0;
  if (it->is_string()) return !it->get_ref<const std::string&>().empty();
  return !it->empty();  // arrays and objects (json's empty() is false for every string)
}

bool has_nonempty(const ordered_json& m, const char* key) {
  auto it = m.find(key);
  return it != m.end() && !it->is_null() && !it->empty();
}

std::string tools_block(const ordered_json& tools, const DsmlTags& tags) {
  std::string schemas;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& t = tools[i];
    if (i) schemas += "\n";
    schemas += python_json_dumps(t.contains("function") ? t["function"] : t);
  }
  return tools_template(tags) + schemas + kToolsTail;
}

// Text content: a string, or a list of parts whose text parts are joined.
std::string content_text(const ordered_json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return content.is_null() ? "" : python_json_dumps(content);
  std::string out;
  bool first = true;
  for (const ordered_json& part : content) {
    if (!first) out += "\n\n";
    first = false;
    const std::string type = string_or(part, "type", "part");
    if (type == "text") out += str(part, "text");
    else out += "[Unsupported " + type + "]";
  }
  return out;
}

// An assistant turn's tool calls. V4.1 decodes string arguments up to twice
// (double-encoded JSON); anything but an object becomes {"arguments": raw}.
std::string tool_calls_part(const ordered_json& calls, ChatFormat format) {
  const DsmlTags& t = dsml_tags(format);
  std::string out = "\n\n" + t.open(t.calls) + ">\n";
  for (size_t c = 0; c < calls.size(); ++c) {
    const ordered_json& fn = calls[c].contains("function") ? calls[c]["function"] : calls[c];
    if (c) out += "\n";
    out += t.open(t.invoke) + " name=\"" + str(fn, "name") + "\">\n";
    ordered_json args;
    bool parsed = false;
    if (fn.contains("arguments") && fn["arguments"].is_object()) {
      args = fn["arguments"];
      parsed = true;
    } else {
      try {
        args = ordered_json::parse(str(fn, "arguments"));
        if (format == ChatFormat::kV41 && args.is_string()) args = ordered_json::parse(args.get<std::string>());
        parsed = args.is_object();
      } catch (const std::exception&) {
      }
    }
    if (!parsed) args = ordered_json{{"arguments", str(fn, "arguments")}};
    std::vector<std::string> params;
    for (auto it = args.begin(); it != args.end(); ++it) {
      const bool is_string = it.value().is_string();
      params.push_back(t.open(t.parameter) + " name=\"" + it.key() + "\" string=\"" + (is_string ? "true" : "false") +
                       "\">" + (is_string ? it.value().get<std::string>() : python_json_dumps(it.value())) +
                       t.close(t.parameter));
    }
    for (size_t i = 0; i < params.size(); ++i) out += (i ? "\n" : "") + params[i];
    out += "\n" + t.close(t.invoke);
  }
  return out + "\n" + t.close(t.calls);
}

struct Block {
  bool tool_result = false;
  std::string text;
  std::string tool_call_id;
};

struct Msg {
  ordered_json raw;  // the message (role, content, ...)
  std::vector<Block> blocks;
  std::string role() const { return string_or(raw, "role", ""); }
  bool has_task() const { return raw.contains("task") && !raw["task"].is_null(); }
};

}  // namespace

std::string python_json_dumps(const ordered_json& v) {
  if (v.is_object()) {
    std::string s = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) s += ", ";
      first = false;
      s += ordered_json(it.key()).dump(-1, ' ', false, ordered_json::error_handler_t::replace) + ": " +
           python_json_dumps(it.value());
    }
    return s + "}";
  }
  if (v.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + python_json_dumps(v[i]);
    return s + "]";
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  }
  return v.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

const DsmlTags& dsml_tags(ChatFormat format) {
  static const DsmlTags v4{"tool_calls", "invoke", "parameter"}, v41{" calls", " invoke", " parameter"};
  return format == ChatFormat::kV41 ? v41 : v4;
}

StatusOr<int> v41_reasoning_budget(const std::string& effort) {
  if (effort.empty() || effort == "high" || effort == "xhigh") return 75;
  if (effort == "low") return 50;
  if (effort == "max") return 100;
  char* end = nullptr;
  const long n = std::strtol(effort.c_str(), &end, 10);
  if (!effort.empty() && *end == '\0' && n >= 1 && n <= 100) return static_cast<int>(n);
  return invalid_argument("DeepSeek-V4.1's reasoning effort is low, high, xhigh, max or a number from 1 to 100, got '" +
                          effort + "'");
}

StatusOr<std::string> encode_chat(const ordered_json& input, const ChatOptions& o) {
  if (!input.is_array()) return invalid_argument("messages must be an array");
  const bool thinking = o.mode == ChatMode::kThinking;
  const bool v41 = o.format == ChatFormat::kV41;
  const DsmlTags& tags = dsml_tags(o.format);
  // V4.1 has no developer turn: it is a system one (as vLLM maps it).
  ordered_json messages = input;
  int effort_budget = 0;
  if (v41) {
    DSV4_ASSIGN_OR_RETURN(effort_budget, v41_reasoning_budget(o.reasoning_effort));
    for (ordered_json& m : messages)
      if (m.is_object() && m.contains("role") && m["role"] == "developer") m["role"] = "system";
  }
  // A: tool results and consecutive user messages fold into one user turn.
  std::vector<Msg> merged;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ordered_json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return invalid_argument("messages[" + std::to_string(i) + "] must be an object with a string 'role'");
    if (has_nonempty(m, "tools")) {
      const ordered_json& tools = m["tools"];
      if (!tools.is_array() || !std::all_of(tools.begin(), tools.end(), [](const auto& t) { return t.is_object(); }))
        return invalid_argument("messages[" + std::to_string(i) + "].tools must be an array of tool objects");
    }
    const std::string role = m["role"].get<std::string>();
    if (role == "tool") {
      Block b{true, content_text(m.value("content", ordered_json())), str(m, "tool_call_id")};
      if (!merged.empty() && merged.back().role() == "user") {
        merged.back().blocks.push_back(b);
      } else {
        Msg u;
        u.raw = {{"role", "user"}};
        u.blocks.push_back(b);
        merged.push_back(u);
      }
    } else if (role == "user") {
      Block b{false, content_text(m.value("content", ordered_json())), ""};
      if (!merged.empty() && merged.back().role() == "user" && !merged.back().has_task()) {
        merged.back().blocks.push_back(b);
      } else {
        Msg u;
        u.raw = {{"role", "user"}, {"content", m.value("content", ordered_json())}};
        for (const char* k : {"task", "wo_eos", "mask"})
          if (m.contains(k)) u.raw[k] = m[k];
        u.blocks.push_back(b);
        merged.push_back(u);
      }
    } else if (role == "system" || role == "developer" || role == "assistant" || role == "latest_reminder") {
      merged.push_back(Msg{m, {}});
    } else {
      return invalid_argument("messages[" + std::to_string(i) + "] has unknown role '" + role + "'");
    }
  }
  // B: tool results in the order of the calls that asked for them.
  std::vector<std::string> call_order;
  for (Msg& m : merged) {
    if (m.role() == "assistant") {
      call_order.clear();
      if (m.raw.contains("tool_calls") && m.raw["tool_calls"].is_array())
        for (const auto& c : m.raw["tool_calls"]) call_order.push_back(str(c, "id"));
      continue;
    }
    std::vector<size_t> slots;
    for (size_t i = 0; i < m.blocks.size(); ++i)
      if (m.blocks[i].tool_result) slots.push_back(i);
    if (slots.size() < 2) continue;
    std::vector<Block> results;
    for (size_t s : slots) results.push_back(m.blocks[s]);
    auto pos = [&](const Block& b) {
      auto it = std::find(call_order.begin(), call_order.end(), b.tool_call_id);
      return it == call_order.end() ? 0 : static_cast<int>(it - call_order.begin());
    };
    std::stable_sort(results.begin(), results.end(), [&](const Block& a, const Block& b) { return pos(a) < pos(b); });
    for (size_t k = 0; k < slots.size(); ++k) m.blocks[slots[k]] = results[k];
  }
  // C: with tools anywhere, earlier reasoning stays.
  bool drop = o.drop_thinking;
  for (const Msg& m : merged)
    if (has_nonempty(m.raw, "tools")) drop = false;
  // Whose turn the assistant answers: a user's (or V4's developer's); in
  // V4.1 also a system message after the first.
  auto answers = [&](const std::vector<Msg>& ms, size_t i) {
    const std::string role = ms[i].role();
    return role == "user" || (v41 ? role == "system" && i > 0 : role == "developer");
  };
  auto last_user = [&](const std::vector<Msg>& ms) {
    int l = -1;
    for (size_t i = 0; i < ms.size(); ++i)
      if (answers(ms, i)) l = static_cast<int>(i);
    return l;
  };
  std::vector<Msg> msgs;
  if (thinking && drop) {
    const int l = last_user(merged);
    for (int i = 0; i < static_cast<int>(merged.size()); ++i) {
      const std::string role = merged[i].role();
      if (role == "user" || role == "system" || role == "tool" || role == "latest_reminder" || i >= l) {
        msgs.push_back(merged[i]);
      } else if (role == "assistant") {
        Msg a = merged[i];
        a.raw.erase("reasoning_content");
        msgs.push_back(a);
      }
    }
  } else {
    msgs = merged;
  }
  const int last = last_user(msgs);

  // D: render.
  std::string out = o.add_bos ? kBos : "";
  for (int i = 0; i < static_cast<int>(msgs.size()); ++i) {
    const Msg& m = msgs[i];
    const std::string role = m.role();
    if (!v41 && i == 0 && thinking && o.reasoning_effort == "max") out += kMaxEffort;
    if (v41 && i == 0) {
      // The first turn is a system one when it states the effort (thinking
      // mode) or is a system message.
      std::string effort;
      if (thinking) {
        char line[160];
        std::snprintf(line, sizeof line, kV41EffortTemplate, effort_budget);
        effort = line;
      }
      if (!effort.empty() || role == "system") out += kSystem + effort;
    }
    auto extras = [&] {
      std::string e;
      if (has_nonempty(m.raw, "tools")) e += "\n\n" + tools_block(m.raw["tools"], tags);
      if (has_nonempty(m.raw, "response_format")) e += "\n\n" + std::string(kResponseFormat) + python_json_dumps(m.raw["response_format"]);
      return e;
    };
    if (role == "system") {
      if (v41 && i > 0) out += kSystem;
      out += str(m.raw, "content") + extras();
    } else if (role == "developer") {
      const std::string content = str(m.raw, "content");
      if (content.empty()) return invalid_argument("messages[" + std::to_string(i) + "]: a developer message needs content");
      out += kUser + content + extras();
    } else if (role == "user") {
      out += kUser;
      if (m.blocks.empty()) {
        out += str(m.raw, "content");
      } else {
        for (size_t b = 0; b < m.blocks.size(); ++b) {
          if (b) out += "\n\n";
          out += m.blocks[b].tool_result ? "<tool_result>" + m.blocks[b].text + "</tool_result>" : m.blocks[b].text;
        }
      }
    } else if (role == "latest_reminder") {
      out += kLatestReminder + str(m.raw, "content");
    } else if (role == "assistant") {
      const bool after_task = i > 0 && msgs[i - 1].has_task();
      if (thinking && !after_task && (!drop || i > last)) out += str(m.raw, "reasoning_content") + kEndThink;
      out += str(m.raw, "content");
      if (m.raw.contains("tool_calls") && m.raw["tool_calls"].is_array() && !m.raw["tool_calls"].empty())
        out += tool_calls_part(m.raw["tool_calls"], o.format);
      if (!truthy(m.raw, "wo_eos")) out += kEos;
    }
    // The turn change after this message.
    const bool next_answers = i + 1 >= static_cast<int>(msgs.size()) || msgs[i + 1].role() == "assistant" ||
                              msgs[i + 1].role() == "latest_reminder";
    if (!next_answers) continue;
    if (m.has_task()) {
      const std::string task = m.raw["task"].is_string() ? m.raw["task"].get<std::string>() : "";
      auto it = task_tokens().find(task);
      if (it == task_tokens().end()) return invalid_argument("unknown task '" + task + "'");
      if (task == "action") out += std::string(kAssistant) + (thinking ? kThink : kEndThink) + it->second;
      else out += it->second;
    } else if (answers(msgs, i) && (i + 1 < static_cast<int>(msgs.size()) || o.add_generation_prompt)) {
      out += std::string(kAssistant) + (thinking && (!drop || i >= last) ? kThink : kEndThink);
    }
  }
  return out;
}

namespace {

// Position and index of the earliest of `needles` in s from `from`.
std::pair<size_t, int> find_first(const std::string& s, size_t from, const std::vector<std::string>& needles) {
  size_t best = std::string::npos;
  int which = -1;
  for (size_t k = 0; k < needles.size(); ++k) {
    const size_t at = s.find(needles[k], from);
    if (at != std::string::npos && (best == std::string::npos || at < best)) {
      best = at;
      which = static_cast<int>(k);
    }
  }
  return {best, which};
}

}  // namespace

StatusOr<ParsedCompletion> parse_completion(const std::string& text, ChatMode mode, ChatFormat format) {
  ParsedCompletion p;
  const DsmlTags& tags = dsml_tags(format);
  const std::string tc_marker = tags.calls_marker();
  size_t at = 0;
  if (mode == ChatMode::kThinking) {
    auto [pos, which] = find_first(text, 0, {kEndThink, tc_marker});
    if (which != 0) return invalid_argument("the completion has no </think> ending its reasoning");
    p.reasoning_content = text.substr(0, pos);
    at = pos + std::strlen(kEndThink);
  }
  auto [pos, which] = find_first(text, at, {kEos, tc_marker});
  if (which < 0) return invalid_argument("the completion has no end of sentence");
  p.content = text.substr(at, pos - at);
  if (which == 0) {
    if (pos + std::strlen(kEos) != text.size()) return invalid_argument("text after the end of sentence");
  } else {
    size_t cur = pos + tc_marker.size();
    const std::string invoke = tags.open(tags.invoke), end_calls = tags.close(tags.calls),
                      param = tags.open(tags.parameter), end_invoke = "</｜DSML｜" + tags.invoke,
                      param_close = "/｜DSML｜" + tags.parameter;
    static const std::regex name_re("^\\s*name=\"([\\s\\S]*?)\">\\n\\n?$");
    static const std::regex param_re("^ name=\"([\\s\\S]*?)\" string=\"(true|false)\">([\\s\\S]*?)<$");
    for (;;) {
      auto [p1, w1] = find_first(text, cur, {invoke, end_calls});
      if (w1 < 0 || text.substr(cur, p1 - cur) != ">\n") return invalid_argument("malformed tool calls block");
      if (w1 == 1) {
        cur = p1 + end_calls.size();
        break;
      }
      cur = p1 + invoke.size();
      auto [p2, w2] = find_first(text, cur, {param, end_invoke});
      std::smatch mm;
      const std::string head = text.substr(cur, p2 - cur);
      if (w2 < 0 || !std::regex_match(head, mm, name_re)) return invalid_argument("malformed tool invoke");
      ParsedToolCall call;
      call.name = mm[1];
      std::vector<std::string> keys;
      std::string args = "{";
      cur = p2;
      int w = w2;
      while (w == 0) {
        cur += param.size();
        const size_t close = text.find(param_close, cur);
        if (close == std::string::npos) return invalid_argument("unterminated tool parameter");
        const std::string body = text.substr(cur, close - cur);
        std::smatch pm;
        if (!std::regex_match(body, pm, param_re)) return invalid_argument("malformed tool parameter");
        const std::string key = pm[1], value = pm[3];
        if (std::find(keys.begin(), keys.end(), key) != keys.end())
          return invalid_argument("duplicate tool parameter '" + key + "'");
        if (!keys.empty()) args += ", ";
        keys.push_back(key);
        args += python_json_dumps(ordered_json(key)) + ": " +
                (pm[2] == "true" ? python_json_dumps(ordered_json(value)) : value);
        cur = close + param_close.size();
        auto [p3, w3] = find_first(text, cur, {param, end_invoke});
        if (w3 < 0 || text.substr(cur, p3 - cur) != ">\n") return invalid_argument("malformed tool parameter end");
        cur = p3;
        w = w3;
      }
      call.arguments = args + "}";
      p.tool_calls.push_back(call);
      cur += end_invoke.size();
    }
    const std::string rest = text.substr(cur);
    if (!rest.empty() && rest != kEos) return invalid_argument("text after the tool calls");
  }
  for (const std::string* s : {&p.content, &p.reasoning_content})
    for (const char* bad : {kBos, kEos, kThink, kEndThink, "｜DSML｜"})
      if (s->find(bad) != std::string::npos)
        return invalid_argument(std::string("the completion's text contains the special string ") + bad);
  return p;
}

const char* text_only_reason(ChatFormat format) {
  return format == ChatFormat::kV41
             ? "DeepSeek-V4.1's vision tower (image inputs) is not loaded by this build, which reads text only"
             : "this model reads text only";
}

}  // namespace dsv4
