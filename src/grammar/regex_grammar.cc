#include "grammar/regex_grammar.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <utility>
#include <vector>

#include "base/utf8.h"

namespace dsv4 {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // code point ranges, inclusive

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (auto [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) out.back().second = std::max(out.back().second, hi);
    else out.push_back({lo, hi});
  }
  return out;
}

Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (auto [lo, hi] : normalized(r)) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }


class RegexCompiler {
 public:
  RegexCompiler(Grammar* g, std::string_view p, const RegexOptions& o, std::string name)
      : g_(g), p_(p), o_(o), name_(std::move(name)) {}

  StatusOr<Symbol> compile() {
    if (!p_.empty() && p_[0] == '^') ++at_;
    DSV4_ASSIGN_OR_RETURN(std::vector<Sequence> alts, alternatives());
    if (at_ < p_.size()) return error("an unmatched ')'");
    return g_->choice(std::move(alts), name_);
  }

 private:
  Status error(const std::string& what) const {
    return invalid_argument("regular expression '" + std::string(p_) + "': " + what + " at offset " + std::to_string(at_));
  }
  bool more() const { return at_ < p_.size(); }
  char peek() const { return p_[at_]; }

  StatusOr<std::vector<Sequence>> alternatives() {
    std::vector<Sequence> alts;
    for (;;) {
      DSV4_ASSIGN_OR_RETURN(Sequence seq, sequence());
      alts.push_back(std::move(seq));
      if (!more() || peek() != '|') break;
      ++at_;
    }
    return alts;
  }

  StatusOr<Sequence> sequence() {
    Sequence seq;
    while (more() && peek() != '|' && peek() != ')') {
      if (peek() == '$' && at_ + 1 == p_.size()) {  // the end anchor: matching is whole-text already
        ++at_;
        break;
      }
      DSV4_ASSIGN_OR_RETURN(Sequence atom, this->atom());
      DSV4_ASSIGN_OR_RETURN(atom, quantified(std::move(atom)));
      seq.insert(seq.end(), atom.begin(), atom.end());
    }
    return seq;
  }

  StatusOr<Sequence> quantified(Sequence atom) {
    if (!more()) return atom;
    int64_t lo = -1, hi = -1;
    const size_t start = at_;
    const char c = peek();
    if (c == '*') lo = 0, hi = -1, ++at_;
    else if (c == '+') lo = 1, hi = -1, ++at_;
    else if (c == '?') lo = 0, hi = 1, ++at_;
    else if (c == '{') {
      size_t k = at_ + 1;
      auto number = [&](int64_t* v) {
        const size_t s = k;
        *v = 0;
        while (k < p_.size() && p_[k] >= '0' && p_[k] <= '9' && *v < 100000) *v = *v * 10 + (p_[k++] - '0');
        return k > s;
      };
      if (!number(&lo)) return atom;  // a literal '{'
      hi = lo;
      if (k < p_.size() && p_[k] == ',') {
        ++k;
        if (!number(&hi)) hi = -1;
      }
      if (k >= p_.size() || p_[k] != '}') {
        at_ = start;
        return atom;
      }
      at_ = k + 1;
      if (hi >= 0 && hi < lo) return error("a repetition {m,n} with n < m");
      if (lo > 10000 || hi > 10000) return error("a repetition count above 10000");
    } else {
      return atom;
    }
    if (more() && (peek() == '?' || peek() == '+')) ++at_;  // lazy or possessive: the same texts
    return Sequence{g_->repeat(std::move(atom), lo, hi, name_)};
  }

  StatusOr<Sequence> atom() {
    const char c = peek();
    if (c == '(') {
      ++at_;
      if (more() && peek() == '?') {
        if (at_ + 1 < p_.size() && p_[at_ + 1] == ':') {
          at_ += 2;
        } else if (at_ + 2 < p_.size() && p_[at_ + 1] == '<' && p_[at_ + 2] != '=' && p_[at_ + 2] != '!') {
          const size_t end = p_.find('>', at_);
          if (end == std::string_view::npos) return error("an unterminated group name");
          at_ = end + 1;
        } else {
          return error("lookaround or inline flags (not supported)");
        }
      }
      DSV4_ASSIGN_OR_RETURN(std::vector<Sequence> alts, alternatives());
      if (!more() || peek() != ')') return error("an unclosed '('");
      ++at_;
      return Sequence{g_->choice(std::move(alts), name_ + "_group")};
    }
    if (c == '[') return klass();
    if (c == '.') {
      ++at_;
      // ECMAScript's '.' (JSON Schema patterns are ECMA-262): anything but
      // the line terminators.
      return chars(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
    }
    if (c == '\\') {
      ++at_;
      if (!more()) return error("a trailing '\\'");
      Ranges r;
      DSV4_ASSIGN_OR_RETURN(bool is_class, escape(&r, false));
      (void)is_class;
      return chars(r);
    }
    if (c == ')' || c == '*' || c == '+' || c == '?') return error(std::string("a '") + c + "' with nothing before it");
    DSV4_ASSIGN_OR_RETURN(uint32_t cp, literal_char());
    return chars({{cp, cp}});
  }

  // One UTF-8 encoded character of the pattern.
  StatusOr<uint32_t> literal_char() {
    const auto b = static_cast<uint8_t>(p_[at_]);
    const int n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    if (n == 0 || at_ + n > p_.size()) return error("invalid UTF-8");
    uint32_t cp = n == 1 ? b : b & (0xFF >> (n + 1));
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(p_[at_ + k]) & 0x3F);
    at_ += n;
    return cp;
  }

  StatusOr<uint32_t> hex(int digits) {
    uint32_t v = 0;
    if (!read_hex(p_, &at_, digits, &v)) return error("a bad hex escape");
    return v;
  }

  // After a backslash: the character(s) it stands for. True for the class
  // escapes (\d \w \s and their complements).
  StatusOr<bool> escape(Ranges* r, bool in_class) {
    const char c = peek();
    ++at_;
    const Ranges digit = {{'0', '9'}}, word = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}},
                 // ECMAScript's white space and line terminators.
                 space = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                          {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    switch (c) {
      case 'd': *r = digit; return true;
      case 'w': *r = word; return true;
      case 's': *r = space; return true;
      case 'D': *r = complement(digit); return true;
      case 'W': *r = complement(word); return true;
      case 'S': *r = complement(space); return true;
      case 'n': *r = {{'\n', '\n'}}; return false;
      case 't': *r = {{'\t', '\t'}}; return false;
      case 'r': *r = {{'\r', '\r'}}; return false;
      case 'f': *r = {{'\f', '\f'}}; return false;
      case 'v': *r = {{'\v', '\v'}}; return false;
      case '0': *r = {{0, 0}}; return false;
      case 'x': {
        DSV4_ASSIGN_OR_RETURN(uint32_t v, hex(2));
        *r = {{v, v}};
        return false;
      }
      case 'u': {
        uint32_t v = 0;
        if (more() && peek() == '{') {
          ++at_;
          const size_t end = p_.find('}', at_);
          if (end == std::string_view::npos || end == at_ || end - at_ > 6) return error("a bad \\u{...} escape");
          DSV4_ASSIGN_OR_RETURN(v, hex(static_cast<int>(end - at_)));
          ++at_;
        } else {
          DSV4_ASSIGN_OR_RETURN(v, hex(4));
        }
        if (v > kMaxCodePoint) return error("a code point above U+10FFFF");
        *r = {{v, v}};
        return false;
      }
      case 'b':
        if (in_class) {
          *r = {{'\b', '\b'}};
          return false;
        }
        return error("a word boundary \\b (not supported)");
      case 'B': return error("\\B (not supported)");
      default:
        if (c >= '1' && c <= '9') return error("a backreference (not supported)");
        if (std::isalpha(static_cast<unsigned char>(c))) return error(std::string("the escape \\") + c + " (not supported)");
        *r = {{static_cast<uint8_t>(c), static_cast<uint8_t>(c)}};
        return false;
    }
  }

  StatusOr<Sequence> klass() {
    ++at_;  // '['
    bool negated = false;
    if (more() && peek() == '^') negated = true, ++at_;
    Ranges r;
    bool first = true;
    for (;;) {
      if (!more()) return error("an unclosed '['");
      if (peek() == ']' && !first) {
        ++at_;
        break;
      }
      first = false;
      Ranges item;
      bool is_class = false;
      if (peek() == '\\') {
        ++at_;
        if (!more()) return error("a trailing '\\'");
        DSV4_ASSIGN_OR_RETURN(is_class, escape(&item, true));
      } else {
        DSV4_ASSIGN_OR_RETURN(uint32_t cp, literal_char());
        item = {{cp, cp}};
      }
      if (!is_class && more() && peek() == '-' && at_ + 1 < p_.size() && p_[at_ + 1] != ']') {
        ++at_;
        Ranges hi;
        if (peek() == '\\') {
          ++at_;
          DSV4_ASSIGN_OR_RETURN(bool hi_class, escape(&hi, true));
          if (hi_class) return error("a range ending in a class escape");
        } else {
          DSV4_ASSIGN_OR_RETURN(uint32_t cp, literal_char());
          hi = {{cp, cp}};
        }
        if (hi[0].first < item[0].first) return error("a range out of order");
        item = {{item[0].first, hi[0].first}};
      }
      r.insert(r.end(), item.begin(), item.end());
    }
    return chars(negated ? complement(r) : normalized(r));
  }

  // A choice of the characters in r, UTF-8 encoded (JSON-escaped when the
  // text is a JSON string's content).
  StatusOr<Sequence> chars(Ranges r) {
    r = normalized(std::move(r));
    std::vector<Sequence> alts;
    Ranges plain;
    for (auto [lo, hi] : r) {
      if (hi >= 0xD800 && lo <= 0xDFFF) {  // surrogates are not characters
        if (lo < 0xD800) plain.push_back({lo, 0xD7FF});
        if (hi > 0xDFFF) plain.push_back({0xE000, hi});
        continue;
      }
      plain.push_back({lo, hi});
    }
    if (o_.json_string) {
      Ranges kept;
      for (auto [lo, hi] : plain) {
        uint32_t a = lo;
        for (uint32_t v = lo; v <= hi && v <= 0x5C; ++v) {
          const bool escaped = v < 0x20 || v == '"' || v == '\\';
          if (!escaped) continue;
          if (v > a) kept.push_back({a, v - 1});
          a = v + 1;
          char buf[8];
          if (v == '"') alts.push_back(g_->literal("\\\""));
          else if (v == '\\') alts.push_back(g_->literal("\\\\"));
          else std::snprintf(buf, sizeof buf, "\\u%04x", v), alts.push_back(g_->literal(buf));
        }
        if (a <= hi) kept.push_back({a, hi});
      }
      plain = kept;
    }
    ByteSet ascii;
    for (auto [lo, hi] : plain) {
      for (uint32_t v = lo; v <= std::min<uint32_t>(hi, 0x7F); ++v) ascii.add(static_cast<uint8_t>(v));
      if (hi >= 0x80) utf8_sequences(std::max<uint32_t>(lo, 0x80), hi, &alts);
    }
    if (!ascii.empty()) alts.insert(alts.begin(), Sequence{g_->bytes(ascii)});
    if (alts.empty()) return error("a class that matches no character");
    if (alts.size() == 1) return alts[0];
    return Sequence{g_->choice(std::move(alts), name_ + "_char")};
  }

  // Byte-range sequences for the code points [lo, hi] (>= 0x80), split so
  // that each byte of an encoding ranges independently (the classic UTF-8
  // range split).
  void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<Sequence>* out) {
    if (lo > hi) return;
    for (uint32_t edge : {0x7FFu, 0xFFFFu})
      if (lo <= edge && hi > edge) {
        utf8_sequences(lo, edge, out);
        utf8_sequences(edge + 1, hi, out);
        return;
      }
    const int n = utf8_length(lo);
    for (int i = 1; i < n; ++i) {
      const uint32_t m = (1u << (6 * i)) - 1;
      if ((lo & ~m) != (hi & ~m)) {
        if ((lo & m) != 0) {
          utf8_sequences(lo, lo | m, out);
          utf8_sequences((lo | m) + 1, hi, out);
          return;
        }
        if ((hi & m) != m) {
          utf8_sequences(lo, (hi & ~m) - 1, out);
          utf8_sequences(hi & ~m, hi, out);
          return;
        }
      }
    }
    const std::string a = utf8_encode(lo), b = utf8_encode(hi);
    Sequence seq;
    for (size_t k = 0; k < a.size(); ++k) seq.push_back(g_->bytes(ByteSet::range(static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k]))));
    out->push_back(std::move(seq));
  }

  Grammar* g_;
  std::string_view p_;
  RegexOptions o_;
  std::string name_;
  size_t at_ = 0;
};

}  // namespace

StatusOr<Symbol> add_regex(Grammar* g, std::string_view pattern, const RegexOptions& options, const std::string& name) {
  return RegexCompiler(g, pattern, options, name).compile();
}

StatusOr<Grammar> regex_grammar(std::string_view pattern) {
  Grammar g;
  DSV4_ASSIGN_OR_RETURN(Symbol s, add_regex(&g, pattern, {}, "regex"));
  g.root = s.id;
  return g;
}

}  // namespace dsv4
