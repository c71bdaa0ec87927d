// Regular expressions as grammar rules: the text must match the whole
// expression (as if anchored at both ends).
//
// Supported: literals and escapes (\n \t \r \f \v \0 \xHH \uHHHH, escaped
// metacharacters), classes [...] and [^...] with ranges, \d \w \s \D \W \S,
// '.', groups (...) (?:...) (?<name>...), alternation, the quantifiers * + ?
// {m} {m,} {m,n} (lazy forms are the same set), and ^ $ at the ends.
// Non-ASCII characters in classes and literals are UTF-8; a negated class
// takes every character not listed. Not supported (an error naming it):
// backreferences, lookaround, word boundaries, inline flags.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "grammar/grammar.h"

namespace dsv4 {

struct RegexOptions {
  // The text is a JSON string's content: '"', '\' and control characters
  // are written as JSON escapes.
  bool json_string = false;
};

// A rule of `g` matching exactly the texts the expression matches.
StatusOr<Symbol> add_regex(Grammar* g, std::string_view pattern, const RegexOptions& options, const std::string& name);

// A grammar whose root is the expression (guided_regex).
StatusOr<Grammar> regex_grammar(std::string_view pattern);

}  // namespace dsv4
