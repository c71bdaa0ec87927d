#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <functional>

namespace dsv4 {
namespace {

constexpr int64_t kNever = INT64_MAX / 4;  // a rule that cannot end

}  // namespace

// ---------------------------------------------------------------- forest

int32_t StackForest::node(int32_t item, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(item)) << 32) | static_cast<uint32_t>(parent + 2);
  auto [it, fresh] = index_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (fresh) {
    const int64_t below = parent < 0 ? 0 : g_->min_bytes(nodes_[parent].item + 1) + nodes_[parent].below;
    nodes_.push_back({item, parent, below});
    mark_.push_back(0);
    row_of_.push_back(-1);
  }
  return it->second;
}

int64_t StackForest::min_complete(int32_t n) const { return g_->min_bytes(nodes_[n].item) + nodes_[n].below; }

void StackForest::close(int32_t n, Closure* out) {
  ++stamp_;
  close_into(n, out);
}

void StackForest::close(const std::vector<int32_t>& nodes, Closure* out) {
  ++stamp_;
  for (int32_t n : nodes) close_into(n, out);
}

int32_t StackForest::step_one(int32_t n, uint8_t byte) {
  if (row_of_[n] < 0) {
    row_of_[n] = static_cast<int32_t>(rows_.size());
    rows_.emplace_back();
    rows_.back().fill(-1);
  }
  if (const int32_t c = rows_[row_of_[n]][byte]; c >= 0) return c;
  Closure out;
  const int32_t i = nodes_[n].item;
  if (g_->byte_set(g_->symbol(i)).has(byte)) {
    ++stamp_;
    close_into(node(i + 1, nodes_[n].parent), &out);
  }
  closures_.push_back(std::move(out));
  const int32_t c = static_cast<int32_t>(closures_.size()) - 1;
  rows_[row_of_[n]][byte] = c;
  return c;
}

void StackForest::step(const std::vector<int32_t>& tops, uint8_t byte, Closure* out) {
  out->clear();
  for (int32_t n : tops) {
    const Closure& c = closures_[step_one(n, byte)];
    out->tops.insert(out->tops.end(), c.tops.begin(), c.tops.end());
    out->accept |= c.accept;
    out->unknown |= c.unknown;
  }
  if (tops.size() > 1) {
    std::sort(out->tops.begin(), out->tops.end());
    out->tops.erase(std::unique(out->tops.begin(), out->tops.end()), out->tops.end());
  }
}

void StackForest::close_into(int32_t n, Closure* out) {
  if (mark_[n] == stamp_) return;
  mark_[n] = stamp_;
  const int32_t i = nodes_[n].item;
  switch (g_->kind(i)) {
    case CompiledGrammar::kTerminal:
      out->tops.push_back(n);
      return;
    case CompiledGrammar::kEnd: {
      const int32_t p = nodes_[n].parent;
      if (p == kAccept) out->accept = true;
      else if (p == kUnknown) out->unknown = true;
      else close_into(node(nodes_[p].item + 1, nodes_[p].parent), out);
      return;
    }
    case CompiledGrammar::kRef: {
      // A reference in tail position returns where its frame would: the
      // frame is not kept, so repetition (r ::= x r) runs in constant depth.
      const int32_t ret = g_->kind(i + 1) == CompiledGrammar::kEnd ? nodes_[n].parent : n;
      for (int32_t s : g_->starts(g_->symbol(i))) close_into(node(s, ret), out);
      return;
    }
  }
}

// --------------------------------------------------------------- compile

StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::compile(const Grammar& grammar,
                                                                           std::shared_ptr<const TokenVocabulary> vocab) {
  const std::string problem = grammar.validate();
  if (!problem.empty()) return invalid_argument(problem);
  std::shared_ptr<CompiledGrammar> g(new CompiledGrammar(grammar, std::move(vocab)));
  DSV4_RETURN_IF_ERROR(g->analyze());
  return std::shared_ptr<const CompiledGrammar>(std::move(g));
}

Status CompiledGrammar::analyze() {
  const int32_t rules = static_cast<int32_t>(grammar_.rules.size());
  starts_.resize(rules);
  for (int32_t r = 0; r < rules; ++r)
    for (const Sequence& seq : grammar_.rules[r].alternatives) {
      starts_[r].push_back(static_cast<int32_t>(kind_.size()));
      for (const Symbol& s : seq) {
        kind_.push_back(s.rule ? kRef : kTerminal);
        symbol_.push_back(s.id);
        rule_of_.push_back(r);
      }
      kind_.push_back(kEnd);
      symbol_.push_back(-1);
      rule_of_.push_back(r);
    }
  const int32_t items = static_cast<int32_t>(kind_.size());

  // The fewest bytes each rule and item needs (fixed point from "never").
  std::vector<int64_t> rule_min(rules, kNever);
  min_bytes_.assign(items, kNever);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < rules; ++r)
      for (int32_t s : starts_[r]) {
        int64_t n = 0;
        for (int32_t i = s; kind_[i] != kEnd && n < kNever; ++i) n += kind_[i] == kTerminal ? 1 : rule_min[symbol_[i]];
        if (n < rule_min[r]) rule_min[r] = n, changed = true;
      }
  }
  for (int32_t r = 0; r < rules; ++r) {
    if (rule_min[r] >= kNever) return invalid_argument("rule '" + grammar_.rules[r].name + "' never ends (every alternative recurses)");
    for (int32_t s : starts_[r]) {
      int32_t e = s;
      while (kind_[e] != kEnd) ++e;
      int64_t n = 0;
      for (int32_t i = e; i >= s; --i) {
        if (kind_[i] == kTerminal) n += 1;
        else if (kind_[i] == kRef) n += rule_min[symbol_[i]];
        min_bytes_[i] = n;
      }
    }
  }

  // Left recursion (a rule reaching itself before reading a byte) would
  // grow the stack without end.
  std::vector<std::vector<int32_t>> leftmost(rules);
  for (int32_t r = 0; r < rules; ++r)
    for (int32_t s : starts_[r])
      for (int32_t i = s; kind_[i] == kRef; ++i) {
        leftmost[r].push_back(symbol_[i]);
        if (rule_min[symbol_[i]] > 0) break;
      }
  std::vector<uint8_t> state(rules, 0);  // 0 new, 1 on the path, 2 done
  std::function<int32_t(int32_t)> cycle = [&](int32_t r) -> int32_t {
    state[r] = 1;
    for (int32_t s : leftmost[r]) {
      if (state[s] == 1) return s;
      if (state[s] == 0)
        if (int32_t c = cycle(s); c >= 0) return c;
    }
    state[r] = 2;
    return -1;
  };
  for (int32_t r = 0; r < rules; ++r)
    if (state[r] == 0)
      if (int32_t c = cycle(r); c >= 0)
        return invalid_argument("rule '" + grammar_.rules[c].name + "' is left-recursive, which the matcher does not run");

  // First bytes of each rule, then the bytes that may follow each rule.
  std::vector<ByteSet> first(rules);
  auto first_of = [&](int32_t i, ByteSet* out) {  // of the sequence from item i; true when it may be empty
    for (; kind_[i] != kEnd; ++i) {
      if (kind_[i] == kTerminal) {
        out->add(grammar_.sets[symbol_[i]]);
        return false;
      }
      out->add(first[symbol_[i]]);
      if (rule_min[symbol_[i]] > 0) return false;
    }
    return true;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < rules; ++r)
      for (int32_t s : starts_[r]) {
        ByteSet f = first[r];
        first_of(s, &f);
        if (!(f == first[r])) first[r] = f, changed = true;
      }
  }
  follow_.assign(rules, ByteSet{});
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t i = 0; i < items; ++i) {
      if (kind_[i] != kRef) continue;
      ByteSet f = follow_[symbol_[i]];
      if (first_of(i + 1, &f)) f.add(follow_[rule_of_[i]]);
      if (!(f == follow_[symbol_[i]])) follow_[symbol_[i]] = f, changed = true;
    }
  }

  // Where each rule returns: the items after its non-tail references, and
  // through tail references wherever the referring rule returns. Only
  // whether there is exactly one place matters, so each set keeps two.
  constexpr int32_t kEndOfText = -1;
  std::vector<std::vector<int32_t>> returns(rules);
  auto add_return = [](std::vector<int32_t>& set, int32_t v) {
    if (set.size() >= 2 || std::find(set.begin(), set.end(), v) != set.end()) return false;
    set.push_back(v);
    return true;
  };
  add_return(returns[grammar_.root], kEndOfText);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t i = 0; i < items; ++i) {
      if (kind_[i] != kRef) continue;
      std::vector<int32_t>& set = returns[symbol_[i]];
      if (kind_[i + 1] != kEnd) {
        changed |= add_return(set, i);
      } else {
        for (int32_t v : std::vector<int32_t>(returns[rule_of_[i]])) changed |= add_return(set, v);
      }
    }
  }
  return_ref_.assign(rules, -1);
  returns_to_accept_only_.assign(rules, 0);
  for (int32_t r = 0; r < rules; ++r) {
    if (returns[r].size() != 1) continue;
    if (returns[r][0] == kEndOfText) returns_to_accept_only_[r] = 1;
    else return_ref_[r] = returns[r][0];
  }
  return Status::Ok();
}

// ------------------------------------------------------------ classify

std::shared_ptr<const CompiledGrammar::TokenClasses> CompiledGrammar::classes(const std::vector<int32_t>& top) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = classes_.find(top);
  if (it != classes_.end()) return it->second;
  if (classes_.size() >= kMaxClasses) {
    classes_.erase(classified_.front());
    classified_.pop_front();
  }
  classified_.push_back(top);
  return classes_.emplace(top, classify(top)).first->second;
}

int64_t CompiledGrammar::num_classified() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(classes_.size());
}

int32_t CompiledGrammar::known_start(const std::vector<int32_t>& top, StackForest* forest, const ByteSet** follow) const {
  const bool ends_below = top.back() == kAcceptBelow;
  std::vector<int32_t> chain(top.begin() + 1, top.end() - (ends_below ? 1 : 0));  // ref items, innermost first
  int32_t rule = rule_of_[chain.empty() ? top[0] : chain.back()];
  int32_t bottom = ends_below ? StackForest::kAccept : StackForest::kUnknown;
  for (int guard = 0; guard < 64 && !ends_below; ++guard) {
    if (returns_to_accept_only_[rule]) {
      bottom = StackForest::kAccept;
      break;
    }
    const int32_t ref = return_ref_[rule];
    if (ref < 0 || std::find(chain.begin(), chain.end(), ref) != chain.end()) break;
    chain.push_back(ref);
    rule = rule_of_[ref];
  }
  *follow = &follow_[rule];  // what may come after the last known rule
  int32_t parent = bottom;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) parent = forest->node(*it, parent);
  return forest->node(top[0], parent);
}

void CompiledGrammar::split_needs(TokenClasses* out) const {
  const int64_t n = vocab_->size();
  out->known_need = out->accepted;
  for (int64_t id = 0; id < n; ++id) {
    if (!((out->accepted[id >> 6] >> (id & 63)) & 1)) continue;
    if (out->need[id] == kNeedUnknown) {
      out->unknown_need.push_back(static_cast<int32_t>(id));
      out->known_need[id >> 6] &= ~(uint64_t{1} << (id & 63));
    } else {
      out->max_need = std::max(out->max_need, out->need[id]);
    }
  }
}

std::unique_ptr<CompiledGrammar::TokenClasses> CompiledGrammar::classify(const std::vector<int32_t>& top) const {
  const TokenVocabulary& v = *vocab_;
  auto out = std::make_unique<TokenClasses>();
  out->accepted.assign((v.size() + 63) / 64, 0);
  out->need.assign(v.size(), kNeedUnknown);
  auto accept = [&](int32_t id, int64_t need) {
    out->accepted[id >> 6] |= uint64_t{1} << (id & 63);
    out->need[id] = static_cast<uint16_t>(std::min<int64_t>(need, kNeedUnknown));
  };
  StackForest forest(this);
  const ByteSet* follow_set = nullptr;
  const int32_t start = known_start(top, &forest, &follow_set);
  const ByteSet& follow = *follow_set;
  out->start_need = forest.min_complete(start);

  const auto& trie = v.trie();
  const auto& ids = v.trie_tokens();
  std::vector<StackForest::Closure> level(v.max_token_bytes() + 2);
  std::vector<uint8_t> popped_above(v.max_token_bytes() + 2, 0);
  level[0].tops = {start};
  for (int32_t t = 1; t < static_cast<int32_t>(trie.size()); ++t) {
    const TokenVocabulary::Node& n = trie[t];
    const StackForest::Closure& up = level[n.depth - 1];
    StackForest::Closure& cur = level[n.depth];
    // A frame below the known ones returned before this byte, and the byte
    // may come after it: the request's stack decides this subtree.
    const bool above = popped_above[n.depth - 1] || (up.unknown && follow.has(n.byte));
    popped_above[n.depth] = above;
    forest.step(up.tops, n.byte, &cur);
    const bool fits = !cur.tops.empty() || cur.accept || cur.unknown;
    int64_t need = cur.unknown ? kNeedUnknown : cur.accept ? 0 : INT64_MAX;
    if (!cur.unknown)
      for (int32_t x : cur.tops) need = std::min(need, forest.min_complete(x));
    for (int32_t k = n.token_begin; k < n.token_end; ++k) {
      if (fits) accept(ids[k], need);
      else if (above) out->uncertain.push_back(ids[k]);
    }
    if (cur.tops.empty() && !cur.unknown) {
      // Nothing inside the known frames goes on below: the subtree is all
      // uncertain or all rejected.
      if (above)
        for (int32_t d = t + 1; d < n.end; ++d)
          for (int32_t k = trie[d].token_begin; k < trie[d].token_end; ++k) out->uncertain.push_back(ids[k]);
      t = n.end - 1;
    }
  }
  split_needs(out.get());
  return out;
}

}  // namespace dsv4
