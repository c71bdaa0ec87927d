#include "grammar/json_schema_grammar.h"

#include <array>
#include <cmath>
#include <map>
#include <set>

#include "grammar/regex_grammar.h"

namespace dsv4 {
namespace {

using json = nlohmann::ordered_json;  // properties keep the schema's order

constexpr int64_t kMaxSafe = 999999999999999;  // 15 digits
constexpr int kMaxDigits = 15;

// Keywords that only annotate.
const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                            "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "strict",
                                            "contentEncoding", "contentMediaType", "name"};
// Keywords this compiler reads.
const std::set<std::string> kSupported = {"type", "properties", "required", "additionalProperties", "enum", "const",
                                          "anyOf", "oneOf", "allOf", "$ref", "items", "prefixItems", "minItems",
                                          "maxItems", "minLength", "maxLength", "pattern", "format", "minimum",
                                          "maximum", "exclusiveMinimum", "exclusiveMaximum", "nullable"};

class SchemaCompiler {
 public:
  // Adds rules to *g; references resolve against `root`.
  SchemaCompiler(Grammar* g, const json& root) : root_(root), g_(g) {}

  StatusOr<Symbol> run(const json& schema, const std::string& path, const std::string& name) {
    DSV4_ASSIGN_OR_RETURN(Symbol s, compile(schema, path));
    return g_->choice({{s}}, name);
  }

  Symbol any_object() { return object_any(); }

 private:
  Status error(const std::string& path, const std::string& what) const {
    return invalid_argument("JSON schema at " + path + ": " + what);
  }

  StatusOr<Symbol> compile(const json& s, const std::string& path) {
    if (++depth_ > 64) return error(path, "nested more than 64 levels");
    struct Leave {
      int* d;
      ~Leave() { --*d; }
    } leave{&depth_};
    if (s.is_boolean()) {
      if (!s.get<bool>()) return error(path, "the schema false matches nothing");
      return value_any();
    }
    if (!s.is_object()) return error(path, "a schema must be an object or a boolean");
    for (const auto& [key, v] : s.items())
      if (!kSupported.count(key) && !kAnnotations.count(key))
        return error(path, "the keyword '" + key + "' is not supported");
    if (s.contains("$ref")) return ref(s["$ref"], path);
    if (s.contains("const")) return Symbol{g_->choice({g_->literal(s["const"].dump())}, "const")};
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) return error(path, "enum must be a non-empty array");
      std::vector<Sequence> alts;
      for (const json& v : s["enum"]) alts.push_back(g_->literal(v.dump()));
      return g_->choice(std::move(alts), "enum");
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_array() || s[key].empty()) return error(path, std::string(key) + " must be a non-empty array");
      std::vector<Sequence> alts;
      for (size_t i = 0; i < s[key].size(); ++i) {
        // The branch takes the sibling keywords too ({"type":..., "anyOf":[...]}).
        json branch = s[key][i];
        if (branch.is_object()) {
          branch = s;
          branch.erase(key);
          for (const auto& [k, v] : s[key][i].items()) branch[k] = v;
        }
        DSV4_ASSIGN_OR_RETURN(Symbol b, compile(branch, path + "/" + key + "/" + std::to_string(i)));
        alts.push_back({b});
      }
      return g_->choice(std::move(alts), key);
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].size() != 1)
        return error(path, "allOf with more than one schema is not supported");
      json merged = s;
      merged.erase("allOf");
      for (const auto& [k, v] : s["allOf"][0].items()) merged[k] = v;
      return compile(merged, path + "/allOf/0");
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      if (s["type"].is_string()) types.push_back(s["type"]);
      else if (s["type"].is_array())
        for (const json& t : s["type"]) types.push_back(t.is_string() ? t.get<std::string>() : "?");
      else return error(path, "type must be a string or an array of strings");
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems")) {
      types.push_back("array");
    } else if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength") || s.contains("format")) {
      types.push_back("string");
    } else {
      return value_any();
    }
    if (s.value("nullable", false)) types.push_back("null");
    std::vector<Sequence> alts;
    for (const std::string& t : types) {
      DSV4_ASSIGN_OR_RETURN(Symbol x, typed(s, t, path));
      alts.push_back({x});
    }
    return g_->choice(std::move(alts), "type");
  }

  StatusOr<Symbol> typed(const json& s, const std::string& type, const std::string& path) {
    if (type == "null") return Symbol{g_->choice({g_->literal("null")}, "null")};
    if (type == "boolean") return Symbol{g_->choice({g_->literal("true"), g_->literal("false")}, "boolean")};
    if (type == "string") return string(s, path);
    if (type == "integer") return integer(s, path);
    if (type == "number") return number(s, path);
    if (type == "object") return object(s, path);
    if (type == "array") return array(s, path);
    return error(path, "unknown type '" + type + "'");
  }

  StatusOr<Symbol> ref(const json& r, const std::string& path) {
    if (!r.is_string()) return error(path, "$ref must be a string");
    const std::string target = r;
    auto known = refs_.find(target);
    if (known != refs_.end()) return Symbol::ref(known->second);
    if (target.empty() || target[0] != '#') return error(path, "only local references ('#...') are supported, not '" + target + "'");
    json::json_pointer pointer;
    try {
      pointer = json::json_pointer(target.substr(1));
    } catch (const json::exception&) {
      return error(path, "the reference '" + target + "' is not a JSON pointer");
    }
    if (!root_.contains(pointer)) return error(path, "the reference '" + target + "' points nowhere");
    // The rule exists before its body so recursion refers to it.
    const int32_t rule = g_->add_rule("ref:" + target);
    refs_[target] = rule;
    DSV4_ASSIGN_OR_RETURN(Symbol body, compile(root_.at(pointer), target));
    g_->add_alternative(rule, {body});
    return Symbol::ref(rule);
  }

  // ------------------------------------------------------------ strings

  Symbol json_char() {
    if (json_char_ < 0) {
      // Any character but '"', '\' and controls, or an escape (\uXXXX
      // outside the surrogates, so each escape is one character).
      ByteSet plain;
      for (int b = 0x20; b < 0x7F; ++b)
        if (b != '"' && b != '\\') plain.add(static_cast<uint8_t>(b));
      const Symbol hexd = g_->bytes([] {
        ByteSet h = ByteSet::range('0', '9');
        h.add_range('a', 'f');
        h.add_range('A', 'F');
        return h;
      }());
      ByteSet first_not_d = ByteSet::range('0', '9');
      first_not_d.add_range('a', 'c');
      first_not_d.add_range('A', 'C');
      first_not_d.add_range('e', 'f');
      first_not_d.add_range('E', 'F');
      ByteSet simple;
      for (char c : std::string("\"\\/bfnrt")) simple.add(static_cast<uint8_t>(c));
      const int32_t r = g_->add_rule("char");
      g_->add_alternative(r, {g_->utf8_char(plain, "utf8")});
      g_->add_alternative(r, {g_->byte('\\'), g_->bytes(simple)});
      g_->add_alternative(r, {g_->byte('\\'), g_->byte('u'), g_->bytes(first_not_d), hexd, hexd, hexd});
      g_->add_alternative(r, {g_->byte('\\'), g_->byte('u'), g_->bytes(ByteSet::of('d')), g_->bytes(ByteSet::range('0', '7')), hexd, hexd});
      g_->add_alternative(r, {g_->byte('\\'), g_->byte('u'), g_->bytes(ByteSet::of('D')), g_->bytes(ByteSet::range('0', '7')), hexd, hexd});
      json_char_ = r;
    }
    return Symbol::ref(json_char_);
  }

  Symbol plain_string() {
    if (string_ < 0) {
      Sequence body = {g_->byte('"'), g_->star({json_char()}, "chars"), g_->byte('"')};
      string_ = g_->choice({std::move(body)}, "string").id;
    }
    return Symbol::ref(string_);
  }

  StatusOr<Symbol> string(const json& s, const std::string& path) {
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) return error(path, "pattern must be a string");
      if (s.contains("minLength") || s.contains("maxLength") || s.contains("format"))
        return error(path, "pattern together with minLength, maxLength or format is not supported");
      RegexOptions o;
      o.json_string = true;
      auto body = add_regex(g_, s["pattern"].get<std::string>(), o, "pattern");
      if (!body.ok()) return error(path, body.status().message());
      return g_->choice({{g_->byte('"'), *body, g_->byte('"')}}, "pattern_string");
    }
    if (s.contains("format")) {
      static const std::map<std::string, std::string> kFormats = {
          {"date", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"},
          {"time", R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
          {"date-time",
           R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
          {"uuid", R"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"},
          {"email", R"([a-z0-9]{1,20}(\.[a-z0-9]{1,20}){0,2}@[a-z0-9]{1,20}(\.[a-z]{2,6}){1,2})"},
      };
      const auto f = kFormats.find(s["format"].is_string() ? s["format"].get<std::string>() : "");
      if (f == kFormats.end()) return error(path, "the format '" + s["format"].dump() + "' is not supported");
      auto body = add_regex(g_, f->second, {}, "format");
      if (!body.ok()) return body.status();
      return g_->choice({{g_->byte('"'), *body, g_->byte('"')}}, "format_string");
    }
    const int64_t lo = s.value("minLength", int64_t{0}), hi = s.value("maxLength", int64_t{-1});
    if (lo < 0 || (hi >= 0 && hi < lo) || lo > 4096 || hi > 4096)
      return error(path, "minLength/maxLength must be 0 <= minLength <= maxLength <= 4096");
    if (lo == 0 && hi < 0) return plain_string();
    return g_->choice({{g_->byte('"'), g_->repeat({json_char()}, lo, hi, "chars"), g_->byte('"')}}, "string");
  }

  // ------------------------------------------------------------ numbers

  Symbol digit() { return g_->bytes(ByteSet::range('0', '9')); }

  // Decimal strings of equal length from a to b.
  void same_length(const std::string& a, const std::string& b, Sequence prefix, std::vector<Sequence>* out) {
    if (a.empty()) {
      out->push_back(std::move(prefix));
      return;
    }
    const std::string ra = a.substr(1), rb = b.substr(1);
    if (a[0] == b[0]) {
      prefix.push_back(g_->byte(a[0]));
      same_length(ra, rb, std::move(prefix), out);
      return;
    }
    const bool low_full = ra.find_first_not_of('0') == std::string::npos;
    const bool high_full = rb.find_first_not_of('9') == std::string::npos;
    const char from = low_full ? a[0] : static_cast<char>(a[0] + 1);
    const char to = high_full ? b[0] : static_cast<char>(b[0] - 1);
    if (!low_full) {
      Sequence p = prefix;
      p.push_back(g_->byte(a[0]));
      same_length(ra, std::string(ra.size(), '9'), std::move(p), out);
    }
    if (from <= to) {
      Sequence p = prefix;
      p.push_back(g_->bytes(ByteSet::range(static_cast<uint8_t>(from), static_cast<uint8_t>(to))));
      for (size_t k = 0; k < ra.size(); ++k) p.push_back(digit());
      out->push_back(std::move(p));
    }
    if (!high_full) {
      Sequence p = prefix;
      p.push_back(g_->byte(b[0]));
      same_length(std::string(rb.size(), '0'), rb, std::move(p), out);
    }
  }

  // Non-negative integers lo..hi, no leading zeros.
  std::vector<Sequence> magnitudes(int64_t lo, int64_t hi) {
    std::vector<Sequence> out;
    if (lo > hi) return out;
    const std::string a = std::to_string(lo), b = std::to_string(hi);
    for (size_t n = a.size(); n <= b.size(); ++n) {
      const std::string from = n == a.size() ? a : "1" + std::string(n - 1, '0');
      const std::string to = n == b.size() ? b : std::string(n, '9');
      same_length(from, to, {}, &out);
    }
    return out;
  }

  Symbol integer_range(int64_t lo, int64_t hi) {
    std::vector<Sequence> alts;
    if (hi >= 0) {
      for (Sequence& m : magnitudes(std::max<int64_t>(lo, 0), hi)) alts.push_back(std::move(m));
    }
    if (lo < 0) {
      const Symbol neg = g_->choice(magnitudes(std::max<int64_t>(1, hi < 0 ? -hi : 1), -lo), "magnitude");
      alts.push_back({g_->byte('-'), neg});
    }
    return g_->choice(std::move(alts), "integer");
  }

  StatusOr<int64_t> bound(const json& s, const char* key, const std::string& path, bool integral) {
    const json& v = s[key];
    if (!v.is_number()) return error(path, std::string(key) + " must be a number");
    const double d = v.get<double>();
    if (integral && d != std::floor(d)) return error(path, std::string(key) + " must be an integer here");
    if (std::fabs(d) > static_cast<double>(kMaxSafe)) return error(path, std::string(key) + " beyond 15 digits is not supported");
    return static_cast<int64_t>(d);
  }

  StatusOr<Symbol> integer(const json& s, const std::string& path) {
    int64_t lo = -kMaxSafe, hi = kMaxSafe;
    auto ceil_bound = [&](const char* key, bool exclusive) -> Status {
      if (!s.contains(key)) return Status::Ok();
      if (!s[key].is_number()) return error(path, std::string(key) + " must be a number");
      const double d = s[key].get<double>();
      if (std::fabs(d) > static_cast<double>(kMaxSafe)) return error(path, std::string(key) + " beyond 15 digits is not supported");
      const int64_t v = static_cast<int64_t>(exclusive ? std::floor(d) + 1 : std::ceil(d));
      lo = std::max(lo, v);
      return Status::Ok();
    };
    auto floor_bound = [&](const char* key, bool exclusive) -> Status {
      if (!s.contains(key)) return Status::Ok();
      if (!s[key].is_number()) return error(path, std::string(key) + " must be a number");
      const double d = s[key].get<double>();
      if (std::fabs(d) > static_cast<double>(kMaxSafe)) return error(path, std::string(key) + " beyond 15 digits is not supported");
      const int64_t v = static_cast<int64_t>(exclusive ? std::ceil(d) - 1 : std::floor(d));
      hi = std::min(hi, v);
      return Status::Ok();
    };
    DSV4_RETURN_IF_ERROR(ceil_bound("minimum", false));
    DSV4_RETURN_IF_ERROR(ceil_bound("exclusiveMinimum", true));
    DSV4_RETURN_IF_ERROR(floor_bound("maximum", false));
    DSV4_RETURN_IF_ERROR(floor_bound("exclusiveMaximum", true));
    if (lo > hi) return error(path, "no integer lies within the bounds");
    return integer_range(lo, hi);
  }

  Symbol fraction() { return g_->optional({g_->byte('.'), g_->repeat({digit()}, 1, kMaxDigits, "frac")}, "fraction"); }

  StatusOr<Symbol> number(const json& s, const std::string& path) {
    for (const char* key : {"exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(key)) return error(path, std::string(key) + " on a number (not an integer) is not supported");
    if (!s.contains("minimum") && !s.contains("maximum")) {
      if (number_ < 0) {
        const Symbol exponent = g_->optional(
            {g_->bytes([] {
               ByteSet e = ByteSet::of('e');
               e.add('E');
               return e;
             }()),
             g_->optional({g_->bytes([] {
                            ByteSet sign = ByteSet::of('+');
                            sign.add('-');
                            return sign;
                          }())},
                         "sign"),
             g_->repeat({digit()}, 1, 2, "exp")},
            "exponent");
        number_ = g_->choice({{integer_range(-kMaxSafe, kMaxSafe), fraction(), exponent}}, "number").id;
      }
      return Symbol::ref(number_);
    }
    int64_t lo = -kMaxSafe, hi = kMaxSafe;
    if (s.contains("minimum")) {
      DSV4_ASSIGN_OR_RETURN(lo, bound(s, "minimum", path, true));
    }
    if (s.contains("maximum")) {
      DSV4_ASSIGN_OR_RETURN(hi, bound(s, "maximum", path, true));
    }
    if (lo > hi) return error(path, "no number lies within the bounds");
    // Magnitudes m in [a, b]: whole parts a..b-1 with any fraction, or b
    // with a zero fraction.
    const Symbol zeros = g_->optional({g_->byte('.'), g_->repeat({g_->byte('0')}, 1, kMaxDigits, "zeros")}, "zero_fraction");
    auto magnitude = [&](int64_t a, int64_t b) {
      std::vector<Sequence> alts;
      if (a < b) alts.push_back({g_->choice(magnitudes(a, b - 1), "whole"), fraction()});
      alts.push_back({g_->choice(magnitudes(b, b), "whole"), zeros});
      return g_->choice(std::move(alts), "magnitude");
    };
    std::vector<Sequence> alts;
    if (hi >= 0) alts.push_back({magnitude(std::max<int64_t>(lo, 0), hi)});
    if (lo < 0) alts.push_back({g_->byte('-'), magnitude(hi < 0 ? -hi : 0, -lo)});
    return g_->choice(std::move(alts), "number");
  }

  // ------------------------------------------------------------ objects

  Symbol object_any() {
    if (object_ < 0) {
      object_ = g_->add_rule("object");
      const Symbol member = g_->choice({{plain_string(), g_->byte(':'), value_any()}}, "member");
      const Symbol rest = g_->star({g_->byte(','), member}, "members");
      g_->add_alternative(object_, {g_->byte('{'), g_->byte('}')});
      g_->add_alternative(object_, {g_->byte('{'), member, rest, g_->byte('}')});
    }
    return Symbol::ref(object_);
  }

  Symbol value_any() {
    if (value_ < 0) {
      value_ = g_->add_rule("value");
      const int32_t array = g_->add_rule("array");
      const Symbol more = g_->star({g_->byte(','), Symbol::ref(value_)}, "elements");
      g_->add_alternative(array, {g_->byte('['), g_->byte(']')});
      g_->add_alternative(array, {g_->byte('['), Symbol::ref(value_), more, g_->byte(']')});
      json number_schema = json::object();
      const Symbol num = *number(number_schema, "#");
      for (Sequence alt : std::vector<Sequence>{{object_any()}, {Symbol::ref(array)}, {plain_string()}, {num},
                                                g_->literal("true"), g_->literal("false"), g_->literal("null")})
        g_->add_alternative(value_, std::move(alt));
    }
    return Symbol::ref(value_);
  }

  StatusOr<Symbol> object(const json& s, const std::string& path) {
    json props = s.value("properties", json::object());
    if (!props.is_object()) return error(path, "properties must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return error(path, "required must be an array");
      for (const json& r : s["required"]) {
        if (!r.is_string()) return error(path, "required must list property names");
        required.insert(r.get<std::string>());
        if (!props.contains(r.get<std::string>())) props[r.get<std::string>()] = true;  // any value
      }
    }
    const json additional = s.value("additionalProperties", json(true));
    if (props.empty()) {
      if (additional.is_boolean() && !additional.get<bool>()) return Symbol{g_->choice({g_->literal("{}")}, "empty_object")};
      // A map: keys are any strings, values follow additionalProperties.
      DSV4_ASSIGN_OR_RETURN(Symbol v, compile(additional, path + "/additionalProperties"));
      const Symbol member = g_->choice({{plain_string(), g_->byte(':'), v}}, "entry");
      return g_->choice({g_->literal("{}"), {g_->byte('{'), member, g_->star({g_->byte(','), member}, "entries"), g_->byte('}')}},
                       "map");
    }
    // Declared properties in order; optional ones may be left out. Rule
    // tail[i][first]: the properties from i on, `first` when none was
    // written yet (no comma before the next). Extra properties are never
    // written (always valid, and no key can repeat a declared one).
    std::vector<std::pair<std::string, Symbol>> members;
    for (const auto& [name, sub] : props.items()) {
      DSV4_ASSIGN_OR_RETURN(Symbol v, compile(sub, path + "/properties/" + name));
      Sequence kv = g_->literal(json(name).dump());
      kv.push_back(g_->byte(':'));
      kv.push_back(v);
      members.push_back({name, g_->choice({std::move(kv)}, "property")});
    }
    const int n = static_cast<int>(members.size());
    std::vector<std::array<Symbol, 2>> tail(n + 1);
    tail[n] = {g_->choice({{}}, "end"), g_->choice({{}}, "end")};
    for (int i = n - 1; i >= 0; --i)
      for (int first = 0; first < 2; ++first) {
        Sequence with;
        if (!first) with.push_back(g_->byte(','));
        with.push_back(members[i].second);
        with.push_back(tail[i + 1][0]);
        std::vector<Sequence> alts = {std::move(with)};
        if (!required.count(members[i].first)) alts.push_back({tail[i + 1][first]});
        tail[i][first] = g_->choice(std::move(alts), "properties");
      }
    return g_->choice({{g_->byte('{'), tail[0][1], g_->byte('}')}}, "object");
  }

  // ------------------------------------------------------------- arrays

  StatusOr<Symbol> array(const json& s, const std::string& path) {
    const int64_t lo = s.value("minItems", int64_t{0}), hi = s.value("maxItems", int64_t{-1});
    if (lo < 0 || (hi >= 0 && hi < lo) || lo > 1024 || hi > 1024)
      return error(path, "minItems/maxItems must be 0 <= minItems <= maxItems <= 1024");
    std::vector<Symbol> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) return error(path, "prefixItems must be an array");
      for (size_t i = 0; i < s["prefixItems"].size(); ++i) {
        DSV4_ASSIGN_OR_RETURN(Symbol p, compile(s["prefixItems"][i], path + "/prefixItems/" + std::to_string(i)));
        prefix.push_back(p);
      }
    }
    const json items = s.value("items", json(true));
    const bool more_allowed = !(items.is_boolean() && !items.get<bool>());
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (hi >= 0 && hi < k) return error(path, "maxItems below the number of prefixItems is not supported");
    if (!more_allowed && lo > k) return error(path, "minItems above the prefixItems with items false");
    Symbol item{};
    if (more_allowed) {
      DSV4_ASSIGN_OR_RETURN(item, compile(items, path + "/items"));
    }
    // The prefix items (all written), then the rest: at least lo - k, at
    // most hi - k.
    Sequence body;
    for (int64_t i = 0; i < k; ++i) {
      if (i) body.push_back(g_->byte(','));
      body.push_back(prefix[i]);
    }
    const int64_t rest_lo = std::max<int64_t>(0, lo - k), rest_hi = !more_allowed ? 0 : hi < 0 ? -1 : hi - k;
    if (rest_hi != 0) {
      if (k > 0) {
        body.push_back(g_->repeat({g_->byte(','), item}, rest_lo, rest_hi, "items"));
      } else if (rest_lo > 0) {
        body.push_back(item);
        body.push_back(g_->repeat({g_->byte(','), item}, rest_lo - 1, rest_hi < 0 ? -1 : rest_hi - 1, "items"));
      } else {
        Sequence some = {item, g_->repeat({g_->byte(','), item}, 0, rest_hi < 0 ? -1 : rest_hi - 1, "items")};
        body.push_back(g_->optional(std::move(some), "elements"));
      }
    }
    Sequence full = {g_->byte('[')};
    full.insert(full.end(), body.begin(), body.end());
    full.push_back(g_->byte(']'));
    return g_->choice({std::move(full)}, "array");
  }

  const json& root_;
  Grammar* g_;
  std::map<std::string, int32_t> refs_;
  int32_t json_char_ = -1, string_ = -1, number_ = -1, object_ = -1, value_ = -1;
  int depth_ = 0;
};

}  // namespace

StatusOr<Symbol> add_json_schema(Grammar* g, const nlohmann::ordered_json& schema, const std::string& name,
                                 const nlohmann::ordered_json* refs_root, const std::string& path) {
  return SchemaCompiler(g, refs_root ? *refs_root : schema).run(schema, path, name);
}

StatusOr<Grammar> json_schema_grammar(const nlohmann::ordered_json& schema) {
  Grammar g;
  DSV4_ASSIGN_OR_RETURN(Symbol root, add_json_schema(&g, schema, "root"));
  g.root = root.id;
  return g;
}

Grammar json_object_grammar() {
  const json none = json::object();
  Grammar g;
  const Symbol object = SchemaCompiler(&g, none).any_object();
  g.root = g.choice({{object}}, "root").id;
  return g;
}

}  // namespace dsv4
