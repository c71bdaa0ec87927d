// One request's place in its grammar: which tokens may come next (a bit
// mask over the whole vocabulary, EOS only when the text may end), and
// advancing by the tokens it takes. Tokens can be undone (speculative
// verification looks ahead through drafts and keeps only what was
// accepted).
//
// With a token budget, the mask also keeps the text finishable: a token
// after which the grammar needs more bytes than tokens remain is masked,
// counting a byte per token (single-byte tokens exist in the byte-level
// vocabularies) and keeping one for EOS, so a constrained answer ends
// complete, closed by EOS, within max_tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "grammar/compiled_grammar.h"

namespace dsv4 {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Takes the token if the grammar allows it (EOS when the text may end);
  // false and no change otherwise.
  bool accept_token(int32_t id);
  // Undoes the last `n` accepted tokens.
  void rollback(int n);
  bool can_end() const { return states_.back().accept; }
  // After EOS was accepted nothing more is.
  bool finished() const { return finished_.back(); }

  // bits: (vocab + 63) / 64 words, set for every allowed token.
  // remaining_tokens: the tokens the request may still produce, this one
  // included (< 0: no limit).
  void fill_mask(uint64_t* bits, int64_t remaining_tokens = -1);
  // The fewest bytes before the text can end.
  int64_t min_bytes_to_end() const;
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  struct State {
    std::vector<int32_t> tops;
    bool accept = false;
  };
  // The state after `text` (empty tops and no accept: not allowed).
  State after(const State& from, const std::string& text);
  bool allows(const State& from, int32_t id);

  std::shared_ptr<const CompiledGrammar> grammar_;
  StackForest forest_;
  std::vector<State> states_;  // states_[0]: the start; back(): now
  std::vector<uint8_t> finished_;
};

}  // namespace dsv4
