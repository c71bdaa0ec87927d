// EBNF grammars in llama.cpp's GBNF notation (what vLLM's guided_grammar
// and llama.cpp's server take), and lists of choices.
//
//   root   ::= "yes" | "no" | item+
//   item   ::= [a-z] [a-z0-9_]* ("," ws)?
//   ws     ::= [ \t\n]{0,4}       # comments run to the end of the line
//
// Literals "..." with escapes (\n \t \r \\ \" \xHH \uHHHH), character
// classes [...] / [^...], rule names, groups ( ), the postfixes * + ? {m}
// {m,} {m,n}, and alternatives |. Rules start with `name ::=`; the root is
// the rule named root (else the first).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"

namespace dsv4 {

StatusOr<Grammar> ebnf_grammar(std::string_view text);

// Exactly one of the strings (guided_choice).
StatusOr<Grammar> choice_grammar(const std::vector<std::string>& choices);

}  // namespace dsv4
