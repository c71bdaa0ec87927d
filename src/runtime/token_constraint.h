// A request's grammar as the engine applies it: the tokens the grammar
// forbids get -inf logits before sampling (so greedy, sampled and
// speculative choices all stay inside it), and the automaton advances by
// the tokens the request actually takes. In thinking mode the grammar
// starts after the text that ends the reasoning (</think>, one token in the
// DeepSeek vocabulary, several in a byte-level one).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar_matcher.h"

namespace dsv4 {

class TokenConstraint {
 public:
  // after: the grammar starts once the output ends with this text (empty:
  // at once).
  TokenConstraint(std::shared_ptr<const CompiledGrammar> grammar, std::string after);

  bool active() const { return active_; }
  // Sets the logits of the tokens the grammar forbids next to -inf.
  // remaining_tokens: the tokens the request may still produce, this one
  // included (the mask keeps the text finishable within them). False when
  // no token at all is allowed (the grammar needs bytes no token of the
  // vocabulary spells).
  bool mask(float* logits, int64_t remaining_tokens);
  // Advances by a token the request took (one the mask allowed).
  void take(int32_t token);
  // The grammar's text is complete and closed by EOS: nothing may follow.
  bool finished() const { return active_ && matcher_.finished(); }
  // How many of `drafts`, in order, the grammar allows (no state changes).
  int64_t allowed_prefix(const std::vector<int32_t>& drafts);

 private:
  // Before the grammar starts: whether the output now ends with after_.
  bool starts_after(int32_t token, std::string* tail) const;

  GrammarMatcher matcher_;
  std::string after_;
  std::string tail_;  // the output's last bytes, while the grammar waits
  bool active_;
  std::vector<uint64_t> bits_;
};

}  // namespace dsv4
