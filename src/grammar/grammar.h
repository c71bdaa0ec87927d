// A context-free grammar over bytes: what every structured-output form
// (JSON Schema, any JSON value, a regular expression, a list of choices, an
// EBNF grammar) compiles to before GrammarMatcher runs it against tokens.
//
// Rules are alternatives of symbol sequences; a symbol is a byte class (a
// set of byte values: one position of the text) or a reference to a rule.
// Repetition is spelled with helper rules (star, plus, repeat), so the
// matcher knows only sequences, choices and recursion.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

struct ByteSet {
  std::array<uint64_t, 4> bits{};

  static ByteSet of(uint8_t b) { return range(b, b); }
  static ByteSet range(uint8_t lo, uint8_t hi);
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi);
  void add(const ByteSet& o);
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return !(bits[0] | bits[1] | bits[2] | bits[3]); }
  ByteSet complement() const;
  bool operator==(const ByteSet& o) const { return bits == o.bits; }
};

struct Symbol {
  int32_t id = 0;     // an index into Grammar::sets (terminal) or Grammar::rules
  bool rule = false;
  static Symbol terminal(int32_t set) { return {set, false}; }
  static Symbol ref(int32_t rule) { return {rule, true}; }
};

using Sequence = std::vector<Symbol>;

struct Rule {
  std::string name;
  std::vector<Sequence> alternatives;
};

class Grammar {
 public:
  std::vector<ByteSet> sets;  // distinct byte classes
  std::vector<Rule> rules;
  int32_t root = -1;

  int32_t add_rule(std::string name);
  void add_alternative(int32_t rule, Sequence seq) { rules[rule].alternatives.push_back(std::move(seq)); }
  int32_t find_rule(std::string_view name) const;  // -1 if none

  // Building blocks; each helper rule gets a name derived from `hint`.
  Symbol bytes(const ByteSet& set);
  Symbol byte(uint8_t b) { return bytes(ByteSet::of(b)); }
  Sequence literal(std::string_view text);
  // A rule with the given alternatives.
  Symbol choice(std::vector<Sequence> alternatives, const std::string& hint);
  Symbol star(Sequence body, const std::string& hint);   // body*
  Symbol plus(Sequence body, const std::string& hint);   // body+
  Symbol optional(Sequence body, const std::string& hint);
  // body{min,max}; max < 0: unbounded.
  Symbol repeat(Sequence body, int64_t min, int64_t max, const std::string& hint);
  // One UTF-8 encoded character whose code point is not in `excluded_ascii`
  // when below 0x80 (the other code points all allowed).
  Symbol utf8_char(const ByteSet& allowed_ascii, const std::string& hint);

  // Checks references and that the root exists; the rules of an EBNF text
  // are checked here too.
  std::string validate() const;  // empty when fine, else what is wrong
  // The grammar as EBNF-like text (debugging, tests).
  std::string to_string() const;

 private:
  int32_t set_index(const ByteSet& set);
};

}  // namespace dsv4
