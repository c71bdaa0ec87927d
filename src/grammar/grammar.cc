#include "grammar/grammar.h"

#include <sstream>

namespace dsv4 {

ByteSet ByteSet::range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  s.add_range(lo, hi);
  return s;
}

void ByteSet::add_range(uint8_t lo, uint8_t hi) {
  for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
}

void ByteSet::add(const ByteSet& o) {
  for (int i = 0; i < 4; ++i) bits[i] |= o.bits[i];
}

ByteSet ByteSet::complement() const {
  ByteSet s;
  for (int i = 0; i < 4; ++i) s.bits[i] = ~bits[i];
  return s;
}

int32_t Grammar::add_rule(std::string name) {
  rules.push_back({std::move(name), {}});
  return static_cast<int32_t>(rules.size()) - 1;
}

int32_t Grammar::find_rule(std::string_view name) const {
  for (size_t i = 0; i < rules.size(); ++i)
    if (rules[i].name == name) return static_cast<int32_t>(i);
  return -1;
}

int32_t Grammar::set_index(const ByteSet& set) {
  for (size_t i = 0; i < sets.size(); ++i)
    if (sets[i] == set) return static_cast<int32_t>(i);
  sets.push_back(set);
  return static_cast<int32_t>(sets.size()) - 1;
}

Symbol Grammar::bytes(const ByteSet& set) { return Symbol::terminal(set_index(set)); }

Sequence Grammar::literal(std::string_view text) {
  Sequence seq;
  for (unsigned char c : text) seq.push_back(byte(c));
  return seq;
}

Symbol Grammar::choice(std::vector<Sequence> alternatives, const std::string& hint) {
  const int32_t r = add_rule(hint);
  for (Sequence& a : alternatives) add_alternative(r, std::move(a));
  return Symbol::ref(r);
}

Symbol Grammar::star(Sequence body, const std::string& hint) {
  // r ::= body r | ""  (the matcher runs the tail call without growing its stack)
  const int32_t r = add_rule(hint + "*");
  body.push_back(Symbol::ref(r));
  add_alternative(r, std::move(body));
  add_alternative(r, {});
  return Symbol::ref(r);
}

Symbol Grammar::plus(Sequence body, const std::string& hint) {
  Sequence seq = body;
  seq.push_back(star(std::move(body), hint));
  return choice({std::move(seq)}, hint + "+");
}

Symbol Grammar::optional(Sequence body, const std::string& hint) {
  return choice({std::move(body), {}}, hint + "?");
}

Symbol Grammar::repeat(Sequence body, int64_t min, int64_t max, const std::string& hint) {
  Sequence seq;
  for (int64_t i = 0; i < min; ++i) seq.insert(seq.end(), body.begin(), body.end());
  if (max < 0) {
    seq.push_back(star(std::move(body), hint));
  } else if (max > min) {
    // Up to max - min more: each optional holds the next, so "a{0,3}" is
    // (a (a (a)?)?)?, one rule per count.
    Sequence tail;
    for (int64_t i = min; i < max; ++i) {
      Sequence more = body;
      more.insert(more.end(), tail.begin(), tail.end());
      tail = {optional(std::move(more), hint)};
    }
    seq.insert(seq.end(), tail.begin(), tail.end());
  }
  return choice({std::move(seq)}, hint + "{" + std::to_string(min) + "," + (max < 0 ? "" : std::to_string(max)) + "}");
}

Symbol Grammar::utf8_char(const ByteSet& allowed_ascii, const std::string& hint) {
  // The multi-byte forms of the code points 0x80 .. 0x10FFFF (RFC 3629
  // table 3.7), shared by every character class.
  int32_t multi = find_rule("utf8_multibyte");
  if (multi < 0) {
    multi = add_rule("utf8_multibyte");
    const ByteSet cont = ByteSet::range(0x80, 0xBF);
    add_alternative(multi, {bytes(ByteSet::range(0xC2, 0xDF)), bytes(cont)});
    add_alternative(multi, {byte(0xE0), bytes(ByteSet::range(0xA0, 0xBF)), bytes(cont)});
    add_alternative(multi, {bytes(ByteSet::range(0xE1, 0xEC)), bytes(cont), bytes(cont)});
    add_alternative(multi, {byte(0xED), bytes(ByteSet::range(0x80, 0x9F)), bytes(cont)});
    add_alternative(multi, {bytes(ByteSet::range(0xEE, 0xEF)), bytes(cont), bytes(cont)});
    add_alternative(multi, {byte(0xF0), bytes(ByteSet::range(0x90, 0xBF)), bytes(cont), bytes(cont)});
    add_alternative(multi, {bytes(ByteSet::range(0xF1, 0xF3)), bytes(cont), bytes(cont), bytes(cont)});
    add_alternative(multi, {byte(0xF4), bytes(ByteSet::range(0x80, 0x8F)), bytes(cont), bytes(cont)});
  }
  ByteSet ascii = allowed_ascii;
  for (int b = 0x80; b < 0x100; ++b) ascii.bits[b >> 6] &= ~(uint64_t{1} << (b & 63));
  std::vector<Sequence> alts;
  if (!ascii.empty()) alts.push_back({bytes(ascii)});
  alts.push_back({Symbol::ref(multi)});
  return choice(std::move(alts), hint);
}

std::string Grammar::validate() const {
  if (root < 0 || root >= static_cast<int32_t>(rules.size())) return "the grammar has no root rule";
  for (const Rule& r : rules) {
    if (r.alternatives.empty()) return "rule '" + r.name + "' has no alternatives";
    for (const Sequence& seq : r.alternatives)
      for (const Symbol& s : seq) {
        if (s.rule && (s.id < 0 || s.id >= static_cast<int32_t>(rules.size())))
          return "rule '" + r.name + "' refers to a rule that does not exist";
        if (!s.rule && (s.id < 0 || s.id >= static_cast<int32_t>(sets.size())))
          return "rule '" + r.name + "' refers to a byte class that does not exist";
        if (!s.rule && sets[s.id].empty()) return "rule '" + r.name + "' has an empty character class";
      }
  }
  return "";
}

std::string Grammar::to_string() const {
  std::ostringstream out;
  auto set_text = [](const ByteSet& s) {
    std::ostringstream t;
    t << "[";
    for (int b = 0; b < 256; ++b) {
      if (!s.has(static_cast<uint8_t>(b))) continue;
      int e = b;
      while (e + 1 < 256 && s.has(static_cast<uint8_t>(e + 1))) ++e;
      auto one = [&](int v) {
        if (v >= 0x21 && v < 0x7F && v != '\\' && v != ']' && v != '-') t << static_cast<char>(v);
        else t << "\\x" << "0123456789abcdef"[v >> 4] << "0123456789abcdef"[v & 15];
      };
      one(b);
      if (e > b) t << "-", one(e);
      b = e;
    }
    t << "]";
    return t.str();
  };
  for (size_t i = 0; i < rules.size(); ++i) {
    out << rules[i].name << (static_cast<int32_t>(i) == root ? " (root)" : "") << " ::=";
    for (size_t a = 0; a < rules[i].alternatives.size(); ++a) {
      out << (a ? " |" : "");
      if (rules[i].alternatives[a].empty()) out << " \"\"";
      for (const Symbol& s : rules[i].alternatives[a]) out << " " << (s.rule ? rules[s.id].name : set_text(sets[s.id]));
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace dsv4
