#include "grammar/grammar_matcher.h"

#include <algorithm>
#include <cstring>

namespace dsv4 {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), forest_(grammar_.get()) {
  std::vector<int32_t> starts;
  for (int32_t s : grammar_->starts(grammar_->root())) starts.push_back(forest_.node(s, StackForest::kAccept));
  StackForest::Closure c;
  forest_.close(starts, &c);
  states_.push_back({std::move(c.tops), c.accept});
  finished_.push_back(0);
}

GrammarMatcher::State GrammarMatcher::after(const State& from, const std::string& text) {
  State s{from.tops, false};
  StackForest::Closure c;
  for (size_t k = 0; k < text.size(); ++k) {
    forest_.step(s.tops, static_cast<uint8_t>(text[k]), &c);
    s.tops.swap(c.tops);
    s.accept = c.accept;
    if (s.tops.empty()) {
      if (k + 1 < text.size()) s.accept = false;  // bytes left over after the end
      break;
    }
  }
  return s;
}

bool GrammarMatcher::allows(const State& from, int32_t id) {
  const State s = after(from, grammar_->vocab().text(id));
  return !s.tops.empty() || s.accept;
}

bool GrammarMatcher::accept_token(int32_t id) {
  if (finished_.back()) return false;
  const TokenVocabulary& v = grammar_->vocab();
  if (id == v.eos()) {
    if (!can_end()) return false;
    states_.push_back(states_.back());
    finished_.push_back(1);
    return true;
  }
  if (!v.is_text(id)) return false;
  State s = after(states_.back(), v.text(id));
  if (s.tops.empty() && !s.accept) return false;
  states_.push_back(std::move(s));
  finished_.push_back(0);
  return true;
}

void GrammarMatcher::rollback(int n) {
  n = std::min<int>(n, static_cast<int>(states_.size()) - 1);
  states_.resize(states_.size() - n);
  finished_.resize(finished_.size() - n);
}

int64_t GrammarMatcher::min_bytes_to_end() const {
  const State& s = states_.back();
  if (s.accept) return 0;
  int64_t best = INT64_MAX;
  for (int32_t n : s.tops) best = std::min(best, forest_.min_complete(n));
  return best;
}

void GrammarMatcher::fill_mask(uint64_t* bits, int64_t remaining_tokens) {
  const TokenVocabulary& v = grammar_->vocab();
  const int64_t words = (v.size() + 63) / 64;
  std::memset(bits, 0, sizeof(uint64_t) * words);
  if (finished_.back()) return;
  const State& now = states_.back();
  // With a budget, only tokens after which the text can still be finished
  // in the tokens left (a byte a token at worst: single-byte tokens exist)
  // are allowed. A token may commit to a long branch (an optional member,
  // another call), so every token's need is checked, not only near the end.
  const int64_t left = remaining_tokens - 2;  // after this token and the closing EOS
  const bool budget = remaining_tokens >= 0;

  // Group the stacks by their top frames: each top's classes decide most
  // tokens; the stacks beneath decide the uncertain few. A top's need is
  // relative to its frames: `extra` is what the real stack adds beneath.
  struct Group {
    std::vector<int32_t> top;
    std::shared_ptr<const CompiledGrammar::TokenClasses> classes;
    int64_t extra = INT64_MAX;
  };
  std::vector<Group> groups;
  for (int32_t n : now.tops) {
    std::vector<int32_t> top = {forest_.item(n)};
    for (int32_t p = forest_.parent(n); static_cast<int>(top.size()) < CompiledGrammar::kTopFrames; p = forest_.parent(p)) {
      if (p < 0) {
        if (p == StackForest::kAccept) top.push_back(CompiledGrammar::kAcceptBelow);
        break;
      }
      top.push_back(forest_.item(p));
    }
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.top == top; });
    if (g == groups.end()) {
      groups.push_back({std::move(top), nullptr, INT64_MAX});
      g = groups.end() - 1;
      g->classes = grammar_->classes(g->top);
    }
    g->extra = std::min(g->extra, forest_.min_complete(n) - g->classes->start_need);
  }
  auto need_after = [&](int32_t id) {
    const State s = after(now, v.text(id));
    int64_t need = s.accept ? 0 : INT64_MAX;
    for (int32_t n : s.tops) need = std::min(need, forest_.min_complete(n));
    return need;
  };
  auto set = [&](int32_t id) { bits[id >> 6] |= uint64_t{1} << (id & 63); };
  auto is_set = [&](int32_t id) { return (bits[id >> 6] >> (id & 63)) & 1; };
  for (const Group& g : groups) {
    const CompiledGrammar::TokenClasses& c = *g.classes;
    if (!budget) {
      for (int64_t w = 0; w < words; ++w) bits[w] |= c.accepted[w];
      continue;
    }
    if (g.extra + c.max_need <= left) {
      for (int64_t w = 0; w < words; ++w) bits[w] |= c.known_need[w];
    } else if (g.extra <= left) {
      // need + extra <= left, a word at a time.
      const uint16_t* need = c.need.data();
      const int64_t limit = std::min<int64_t>(left - g.extra, CompiledGrammar::kNeedUnknown - 1);
      for (int64_t w = 0; w < words; ++w) {
        const uint64_t known = c.known_need[w];
        if (!known) continue;
        uint64_t fit = 0;
        const int64_t base = w * 64, n = std::min<int64_t>(64, v.size() - base);
        for (int64_t b = 0; b < n; ++b) fit |= static_cast<uint64_t>(need[base + b] <= limit) << b;
        bits[w] |= known & fit;
      }
    }
    for (int32_t id : c.unknown_need)
      if (!is_set(id) && need_after(id) <= left) set(id);
  }
  for (const Group& g : groups)
    for (int32_t id : g.classes->uncertain) {
      if (is_set(id)) continue;
      if (budget ? need_after(id) <= left : allows(now, id)) set(id);
    }
  const int32_t eos = v.eos();
  if (now.accept && eos >= 0 && eos < v.size()) set(eos);
  if (!budget) return;
  for (int64_t w = 0; w < words; ++w)
    if (bits[w]) return;
  fill_mask(bits, -1);  // it cannot be finished in time anyway
}

}  // namespace dsv4
