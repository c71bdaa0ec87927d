#include "grammar/ebnf_grammar.h"

#include <cctype>
#include <map>

#include "base/utf8.h"
#include "grammar/regex_grammar.h"

namespace dsv4 {
namespace {

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view t) : t_(t) {}

  StatusOr<Grammar> run() {
    skip();
    if (!more()) return error("the grammar is empty");
    std::string first;
    while (more()) {
      std::string name = ident();
      if (name.empty()) return error("a rule name");
      skip();
      if (t_.substr(at_, 3) != "::=") return error("'::=' after '" + name + "'");
      at_ += 3;
      if (first.empty()) first = name;
      const int32_t r = rule(name);
      if (defined_.count(name)) return error("rule '" + name + "' defined twice");
      defined_[name] = true;
      DSV4_ASSIGN_OR_RETURN(std::vector<Sequence> alts, alternatives());
      for (Sequence& a : alts) g_.add_alternative(r, std::move(a));
      skip();
    }
    for (const auto& [name, id] : rules_)
      if (!defined_.count(name)) return invalid_argument("grammar: rule '" + name + "' is used but not defined");
    g_.root = rules_.count("root") ? rules_["root"] : rules_[first];
    return std::move(g_);
  }

 private:
  Status error(const std::string& expected) const {
    int line = 1;
    for (size_t k = 0; k < at_ && k < t_.size(); ++k) line += t_[k] == '\n';
    return invalid_argument("grammar: expected " + expected + " at line " + std::to_string(line));
  }
  bool more() const { return at_ < t_.size(); }
  static bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; }

  void skip() {
    while (more()) {
      if (std::isspace(static_cast<unsigned char>(t_[at_]))) ++at_;
      else if (t_[at_] == '#')
        while (more() && t_[at_] != '\n') ++at_;
      else break;
    }
  }

  std::string ident() {
    const size_t s = at_;
    while (more() && name_char(t_[at_]) && !(t_[at_] == '.' && at_ == s)) ++at_;
    return std::string(t_.substr(s, at_ - s));
  }

  // Whether the text at `at_` starts a new rule (name ::=).
  bool rule_start() const {
    size_t k = at_;
    while (k < t_.size() && name_char(t_[k])) ++k;
    if (k == at_) return false;
    while (k < t_.size() && std::isspace(static_cast<unsigned char>(t_[k]))) ++k;
    return t_.substr(k, 3) == "::=";
  }

  int32_t rule(const std::string& name) {
    auto it = rules_.find(name);
    if (it != rules_.end()) return it->second;
    return rules_[name] = g_.add_rule(name);
  }

  StatusOr<std::vector<Sequence>> alternatives() {
    std::vector<Sequence> alts;
    for (;;) {
      DSV4_ASSIGN_OR_RETURN(Sequence seq, sequence());
      alts.push_back(std::move(seq));
      skip();
      if (!more() || t_[at_] != '|') break;
      ++at_;
    }
    return alts;
  }

  StatusOr<Sequence> sequence() {
    Sequence seq;
    for (;;) {
      skip();
      if (!more() || t_[at_] == '|' || t_[at_] == ')' || rule_start()) break;
      DSV4_ASSIGN_OR_RETURN(Sequence atom, this->atom());
      DSV4_ASSIGN_OR_RETURN(atom, postfix(std::move(atom)));
      seq.insert(seq.end(), atom.begin(), atom.end());
    }
    return seq;
  }

  StatusOr<Sequence> postfix(Sequence atom) {
    if (!more()) return atom;
    const char c = t_[at_];
    if (c == '*' || c == '+' || c == '?') {
      ++at_;
      const int64_t lo = c == '+' ? 1 : 0, hi = c == '?' ? 1 : -1;
      return Sequence{g_.repeat(std::move(atom), lo, hi, "rep")};
    }
    if (c != '{') return atom;
    ++at_;
    auto number = [&](int64_t* v) {
      skip();
      const size_t s = at_;
      *v = 0;
      while (more() && std::isdigit(static_cast<unsigned char>(t_[at_])) && *v < 100000) *v = *v * 10 + (t_[at_++] - '0');
      return at_ > s;
    };
    int64_t lo = 0, hi = 0;
    if (!number(&lo)) return error("a count after '{'");
    hi = lo;
    skip();
    if (more() && t_[at_] == ',') {
      ++at_;
      if (!number(&hi)) hi = -1;
      skip();
    }
    if (!more() || t_[at_] != '}') return error("'}'");
    ++at_;
    if ((hi >= 0 && hi < lo) || lo > 10000 || hi > 10000) return error("a repetition {m,n} with m <= n <= 10000");
    return Sequence{g_.repeat(std::move(atom), lo, hi, "rep")};
  }

  StatusOr<Sequence> atom() {
    const char c = t_[at_];
    if (c == '"') return literal();
    if (c == '[' || c == '.') {
      // A class (or any character): the regex compiler reads the same notation.
      size_t end = at_ + 1;
      if (c == '[') {
        if (end < t_.size() && t_[end] == '^') ++end;
        if (end < t_.size() && t_[end] == ']') ++end;
        while (end < t_.size() && t_[end] != ']') end += t_[end] == '\\' ? 2 : 1;
        if (end >= t_.size()) return error("']'");
        ++end;
      }
      auto s = add_regex(&g_, t_.substr(at_, end - at_), {}, "class");
      if (!s.ok()) return invalid_argument("grammar: " + s.status().message());
      at_ = end;
      return Sequence{*s};
    }
    if (c == '(') {
      ++at_;
      DSV4_ASSIGN_OR_RETURN(std::vector<Sequence> alts, alternatives());
      skip();
      if (!more() || t_[at_] != ')') return error("')'");
      ++at_;
      return Sequence{g_.choice(std::move(alts), "group")};
    }
    if (name_char(c)) return Sequence{Symbol::ref(rule(ident()))};
    return error("a literal, a class, a group or a rule name");
  }

  StatusOr<Sequence> literal() {
    ++at_;  // '"'
    std::string bytes;
    while (more() && t_[at_] != '"') {
      if (t_[at_] != '\\') {
        bytes += t_[at_++];
        continue;
      }
      ++at_;
      if (!more()) return error("an escape");
      const char e = t_[at_++];
      auto hex = [&](int n, uint32_t* v) { return read_hex(t_, &at_, n, v); };
      uint32_t v = 0;
      switch (e) {
        case 'n': bytes += '\n'; break;
        case 't': bytes += '\t'; break;
        case 'r': bytes += '\r'; break;
        case 'x':
          if (!hex(2, &v)) return error("two hex digits after \\x");
          bytes += static_cast<char>(v);
          break;
        case 'u':
          if (!hex(4, &v)) return error("four hex digits after \\u");
          bytes += utf8_encode(v);
          break;
        default: bytes += e;
      }
    }
    if (!more()) return error("a closing '\"'");
    ++at_;
    return g_.literal(bytes);
  }

  std::string_view t_;
  size_t at_ = 0;
  Grammar g_;
  std::map<std::string, int32_t> rules_;
  std::map<std::string, bool> defined_;
};

}  // namespace

StatusOr<Grammar> ebnf_grammar(std::string_view text) { return EbnfParser(text).run(); }

StatusOr<Grammar> choice_grammar(const std::vector<std::string>& choices) {
  if (choices.empty()) return invalid_argument("guided_choice needs at least one choice");
  Grammar g;
  std::vector<Sequence> alts;
  for (const std::string& c : choices) alts.push_back(g.literal(c));
  g.root = g.choice(std::move(alts), "choice").id;
  return g;
}

}  // namespace dsv4
