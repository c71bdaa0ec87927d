#include "server/structured_output.h"

#include <algorithm>
#include <array>
#include <set>

#include "grammar/ebnf_grammar.h"
#include "grammar/json_schema_grammar.h"
#include "grammar/regex_grammar.h"
#include "server/request_json.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;

ApiError bad(std::string message, std::string param) {
  return api_error(400, std::move(message), std::move(param), "invalid_value");
}

// One constraint a request asked for: where, its cache key, how to build it.
struct Wanted {
  std::string param;
  std::string key;
  GrammarCache::Build build;
};

Wanted json_schema_wanted(std::string param, ordered_json schema) {
  std::string key = "json_schema\n" + schema.dump();
  return {std::move(param), std::move(key), [schema = std::move(schema)] { return json_schema_grammar(schema); }};
}

Wanted json_object_wanted(std::string param) {
  return {std::move(param), "json_object", []() -> StatusOr<Grammar> { return json_object_grammar(); }};
}

std::optional<ApiError> regex_wanted(const ordered_json& v, std::string param, std::vector<Wanted>* out) {
  if (!v.is_string()) return bad(param + " must be a string (a regular expression)", param);
  const std::string pattern = v.get<std::string>();
  out->push_back({std::move(param), "regex\n" + pattern, [pattern] { return regex_grammar(pattern); }});
  return std::nullopt;
}

std::optional<ApiError> choice_wanted(const ordered_json& v, std::string param, std::vector<Wanted>* out) {
  if (!v.is_array() || v.empty()) return bad(param + " must be a non-empty array of strings", param);
  std::vector<std::string> choices;
  for (const auto& c : v) {
    if (!c.is_string()) return bad(param + " must be a non-empty array of strings", param);
    choices.push_back(c.get<std::string>());
  }
  out->push_back({std::move(param), "choice\n" + v.dump(), [choices] { return choice_grammar(choices); }});
  return std::nullopt;
}

std::optional<ApiError> grammar_wanted(const ordered_json& v, std::string param, std::vector<Wanted>* out) {
  if (!v.is_string()) return bad(param + " must be a string (a GBNF grammar)", param);
  const std::string text = v.get<std::string>();
  out->push_back({std::move(param), "ebnf\n" + text, [text] { return ebnf_grammar(text); }});
  return std::nullopt;
}

// A JSON schema given as an object or as its JSON text (vLLM takes both).
std::optional<ApiError> schema_wanted(const ordered_json& v, std::string param, std::vector<Wanted>* out) {
  ordered_json schema = v;
  if (v.is_string()) {
    try {
      schema = ordered_json::parse(v.get<std::string>());
    } catch (const std::exception&) {
      return bad(param + " is not valid JSON", param);
    }
  }
  if (!schema.is_object() && !schema.is_boolean()) return bad(param + " must be a JSON schema (an object)", param);
  out->push_back(json_schema_wanted(std::move(param), std::move(schema)));
  return std::nullopt;
}

std::optional<ApiError> response_format_wanted(const ordered_json& rf, std::vector<Wanted>* out) {
  const std::string type = rf.is_object() && rf.contains("type") && rf["type"].is_string() ? rf["type"].get<std::string>() : "";
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    out->push_back(json_object_wanted("response_format"));
    return std::nullopt;
  }
  if (type == "json_schema" && rf.contains("json_schema") && rf["json_schema"].is_object()) {
    const ordered_json& js = rf["json_schema"];
    if (!given(js, "schema")) {  // no schema: any JSON object
      out->push_back(json_object_wanted("response_format"));
      return std::nullopt;
    }
    return schema_wanted(js["schema"], "response_format", out);
  }
  return bad("response_format must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
             "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": ...}}",
             "response_format");
}

std::optional<ApiError> structured_outputs_wanted(const ordered_json& so, std::vector<Wanted>* out) {
  const std::string param = "structured_outputs";
  if (!so.is_object()) return bad("structured_outputs must be an object", param);
  const size_t before = out->size();
  for (const auto& [key, v] : so.items()) {
    if (v.is_null()) continue;
    if (key == "json") {
      if (auto e = schema_wanted(v, param + ".json", out)) return e;
    } else if (key == "regex") {
      if (auto e = regex_wanted(v, param + ".regex", out)) return e;
    } else if (key == "choice") {
      if (auto e = choice_wanted(v, param + ".choice", out)) return e;
    } else if (key == "grammar") {
      if (auto e = grammar_wanted(v, param + ".grammar", out)) return e;
    } else if (key == "json_object") {
      if (!v.is_boolean()) return bad("structured_outputs.json_object must be a boolean", param);
      if (v.get<bool>()) out->push_back(json_object_wanted(param + ".json_object"));
    } else if (key == "backend" || key == "disable_fallback" || key == "disable_any_whitespace" ||
               key == "disable_additional_properties") {
      // Choices of vLLM's backends; this engine has one, whose JSON is
      // compact and never writes undeclared properties.
    } else {
      return bad("structured_outputs." + key + " is not supported (json, regex, choice, grammar or json_object)", param);
    }
  }
  if (out->size() == before) return bad("structured_outputs needs one of json, regex, choice, grammar, json_object", param);
  return std::nullopt;
}

// ------------------------------------------------------------ tool calls


Sequence concat(Sequence a, const Sequence& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Any character but U+FF5C ("｜", EF BD 9C), the DSML markers' bar, so a raw
// string value can never spell a marker that would end it early.
Symbol raw_char(Grammar* g) {
  if (const int32_t r = g->find_rule("raw_char"); r >= 0) return Symbol::ref(r);
  const int32_t r = g->add_rule("raw_char");
  const Symbol cont = g->bytes(ByteSet::range(0x80, 0xBF));
  g->add_alternative(r, {g->bytes(ByteSet::range(0x01, 0x7F))});
  g->add_alternative(r, {g->bytes(ByteSet::range(0xC2, 0xDF)), cont});
  g->add_alternative(r, {g->byte(0xE0), g->bytes(ByteSet::range(0xA0, 0xBF)), cont});
  g->add_alternative(r, {g->bytes(ByteSet::range(0xE1, 0xEC)), cont, cont});
  g->add_alternative(r, {g->byte(0xED), g->bytes(ByteSet::range(0x80, 0x9F)), cont});
  g->add_alternative(r, {g->byte(0xEE), cont, cont});
  ByteSet ef_second = ByteSet::range(0x80, 0xBF);
  ef_second.bits[0xBD >> 6] &= ~(uint64_t{1} << (0xBD & 63));
  g->add_alternative(r, {g->byte(0xEF), g->bytes(ef_second), cont});
  ByteSet bd_third = ByteSet::range(0x80, 0xBF);
  bd_third.bits[0x9C >> 6] &= ~(uint64_t{1} << (0x9C & 63));
  g->add_alternative(r, {g->byte(0xEF), g->byte(0xBD), g->bytes(bd_third)});
  g->add_alternative(r, {g->byte(0xF0), g->bytes(ByteSet::range(0x90, 0xBF)), cont, cont});
  g->add_alternative(r, {g->bytes(ByteSet::range(0xF1, 0xF3)), cont, cont, cont});
  g->add_alternative(r, {g->byte(0xF4), g->bytes(ByteSet::range(0x80, 0x8F)), cont, cont});
  return Symbol::ref(r);
}

// A string parameter the encoder writes raw (string="true"): a plain
// string schema, or an enum / const of strings; nullopt for the rest
// (written as JSON, string="false").
std::optional<Symbol> raw_string_value(Grammar* g, const ordered_json& s) {
  if (!s.is_object()) return std::nullopt;
  static const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$comment"};
  const bool is_string = s.contains("type") && s["type"] == "string";
  std::vector<std::string> values;
  for (const auto& [key, v] : s.items()) {
    if (kAnnotations.count(key) || (key == "type" && is_string)) continue;
    if (key != "enum" && key != "const") return std::nullopt;
    for (const ordered_json& x : key == "enum" && v.is_array() ? v : ordered_json::array({v})) {
      if (!x.is_string() || x.get<std::string>().find("｜") != std::string::npos) return std::nullopt;
      values.push_back(x.get<std::string>());
    }
  }
  if (!values.empty()) {
    std::vector<Sequence> alts;
    for (const std::string& v : values) alts.push_back(g->literal(v));
    return g->choice(std::move(alts), "raw_enum");
  }
  if (!is_string) return std::nullopt;
  return g->star({raw_char(g)}, "raw_string");
}

StatusOr<Symbol> parameter(Grammar* g, const DsmlTags& t, const std::string& name, const ordered_json& schema,
                           const ordered_json& root, const std::string& path) {
  const std::string open = t.open(t.parameter) + " name=\"" + name + "\" string=\"";
  const std::string close = t.close(t.parameter);
  if (std::optional<Symbol> raw = raw_string_value(g, schema))
    return g->choice({concat(concat(g->literal(open + "true\">"), {*raw}), g->literal(close))}, "parameter");
  DSV4_ASSIGN_OR_RETURN(Symbol value, add_json_schema(g, schema, "value", &root, path));
  return g->choice({concat(concat(g->literal(open + "false\">"), {value}), g->literal(close))}, "parameter");
}

StatusOr<Symbol> invoke(Grammar* g, const DsmlTags& t, const ordered_json& fn, const std::string& where) {
  const std::string name = fn["name"].get<std::string>();
  const ordered_json params = fn.contains("parameters") && !fn["parameters"].is_null() ? fn["parameters"] : ordered_json::object();
  auto error = [&](const std::string& what) {
    return invalid_argument(where + " (" + name + "): parameters " + what);
  };
  if (!params.is_object()) return error("must be a JSON schema object");
  for (const char* key : {"$ref", "anyOf", "oneOf", "allOf", "not", "if"})
    if (params.contains(key)) return error(std::string("with '") + key + "' at the top are not supported (give properties)");
  if (params.contains("type") && params["type"] != "object") return error("must have type object");
  ordered_json props = params.value("properties", ordered_json::object());
  if (!props.is_object()) return error("properties must be an object");
  std::set<std::string> required;
  if (params.contains("required")) {
    if (!params["required"].is_array()) return error("required must be an array");
    for (const auto& r : params["required"]) {
      if (!r.is_string()) return error("required must list property names");
      required.insert(r.get<std::string>());
      if (!props.contains(r.get<std::string>())) props[r.get<std::string>()] = true;
    }
  }
  // The encoder writes each parameter then a newline, in the schema's
  // order; optional ones may be left out, and with none at all the invoke
  // still has its empty line (tail[i][first]: parameters from i on,
  // `first` when none was written yet).
  std::vector<std::pair<std::string, Symbol>> members;
  for (const auto& [key, sub] : props.items()) {
    DSV4_ASSIGN_OR_RETURN(Symbol p, parameter(g, t, key, sub, params, "#/properties/" + key));
    members.push_back({key, p});
  }
  const int n = static_cast<int>(members.size());
  std::vector<std::array<Symbol, 2>> tail(n + 1);
  tail[n] = {g->choice({{}}, "end"), g->choice({{g->byte('\n')}}, "no_parameters")};
  for (int i = n - 1; i >= 0; --i)
    for (int first = 0; first < 2; ++first) {
      std::vector<Sequence> alts = {{members[i].second, g->byte('\n'), tail[i + 1][0]}};
      if (!required.count(members[i].first)) alts.push_back({tail[i + 1][first]});
      tail[i][first] = g->choice(std::move(alts), "parameters");
    }
  Sequence seq = g->literal(t.open(t.invoke) + " name=\"" + name + "\">\n");
  seq.push_back(tail[0][1]);
  return g->choice({concat(std::move(seq), g->literal(t.close(t.invoke)))}, "invoke");
}

}  // namespace

StatusOr<Grammar> tool_call_grammar(const ordered_json& tools, bool parallel, ChatFormat format) {
  const DsmlTags& t = dsml_tags(format);
  Grammar g;
  std::vector<Sequence> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    DSV4_ASSIGN_OR_RETURN(Symbol call, invoke(&g, t, tools[i]["function"], "tools[" + std::to_string(i) + "]"));
    calls.push_back({call});
  }
  if (calls.empty()) return invalid_argument("no tools to call");
  const Symbol call = g.choice(std::move(calls), "call");
  Sequence body = g.literal(t.calls_marker() + ">\n");
  body.push_back(call);
  if (parallel) body.push_back(g.star({g.byte('\n'), call}, "more_calls"));
  g.root = g.choice({concat(std::move(body), g.literal("\n" + t.close(t.calls)))}, "root").id;
  return g;
}

std::shared_ptr<const TokenVocabulary> grammar_vocabulary(const Tokenizer& tokenizer, int64_t model_vocab, int32_t bos,
                                                          int32_t eos) {
  const int64_t n = std::min(tokenizer.vocab_size(), model_vocab);
  std::vector<std::string> text(n);
  std::vector<bool> special(n, false);
  for (int32_t id = 0; id < n; ++id) {
    text[id] = tokenizer.token_bytes(id);
    special[id] = !tokenizer.spells_text(id) || id == bos;
  }
  return std::make_shared<TokenVocabulary>(std::move(text), special, model_vocab, eos);
}

bool StructuredOutputs::asked(const ordered_json& b, const ForcedToolCalls& forced) {
  if (!forced.tools.empty()) return true;
  if (given(b, "response_format") && b["response_format"].is_object() && string_field(b["response_format"], "type") != "text")
    return true;
  for (const char* k : {"structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar"})
    if (given(b, k)) return true;
  return false;
}

std::optional<ApiError> StructuredOutputs::apply(const ordered_json& b, const ForcedToolCalls& forced, ChatMode mode,
                                                 SamplingParams* params) {
  std::vector<Wanted> wanted;
  if (!forced.tools.empty()) {
    const ordered_json tools = forced.tools;
    const bool parallel = forced.parallel;
    const ChatFormat format = format_;
    wanted.push_back({"tool_choice", "tools\n" + std::to_string(parallel) + std::to_string(static_cast<int>(format)) + tools.dump(),
                      [tools, parallel, format] { return tool_call_grammar(tools, parallel, format); }});
  } else if (given(b, "response_format")) {
    // With a forced tool call the reply has no content to format.
    if (auto e = response_format_wanted(b["response_format"], &wanted)) return e;
  }
  if (given(b, "structured_outputs"))
    if (auto e = structured_outputs_wanted(b["structured_outputs"], &wanted)) return e;
  if (given(b, "guided_json"))
    if (auto e = schema_wanted(b["guided_json"], "guided_json", &wanted)) return e;
  if (given(b, "guided_regex"))
    if (auto e = regex_wanted(b["guided_regex"], "guided_regex", &wanted)) return e;
  if (given(b, "guided_choice"))
    if (auto e = choice_wanted(b["guided_choice"], "guided_choice", &wanted)) return e;
  if (given(b, "guided_grammar"))
    if (auto e = grammar_wanted(b["guided_grammar"], "guided_grammar", &wanted)) return e;
  if (wanted.empty()) return std::nullopt;
  if (wanted.size() > 1)
    return bad(wanted[0].param + " and " + wanted[1].param + " both constrain the output; give one", wanted[1].param);
  const Wanted& w = wanted[0];
  auto compiled = cache_.get(w.key, w.build);
  if (!compiled.ok()) return bad(w.param + ": " + compiled.status().message(), w.param);
  params->grammar = std::move(*compiled);
  params->grammar_after = mode == ChatMode::kThinking ? chat_tokens::kEndThink : "";
  return std::nullopt;
}

}  // namespace dsv4
