// A Grammar prepared for matching against one vocabulary: its rules laid
// out as items (a position in one alternative), the bytes each item still
// needs at the least, and per stack top the classes of tokens the top
// frames decide alone (computed once per top, then shared by every request
// with the same grammar). A top is the items of a stack's top frames (up to
// kTopFrames), extended by the rules they return to unambiguously (a rule
// called from a single place returns there):
//
//   accepted   the token's bytes all fit inside those known frames,
//              whatever the stack beneath;
//   uncertain  the token leaves the known frames with bytes to spare, and
//              the next byte may follow them: the request's own stack
//              decides (GrammarMatcher checks these few tokens);
//   the rest   rejected.
//
// This is the split of XGrammar's adaptive token mask cache, over a
// pushdown automaton whose stacks are shared trees (StackForest).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/token_vocabulary.h"

namespace dsv4 {

class CompiledGrammar;

// Stacks of the pushdown automaton as interned (item, parent) nodes: a
// node is a whole stack, so sets of stacks are sets of ints and stacks
// share their bottoms. A parent item sits on a rule reference; returning
// advances it.
class StackForest {
 public:
  static constexpr int32_t kAccept = -1;   // below the root: the text may end
  static constexpr int32_t kUnknown = -2;  // below a classification's known frames

  explicit StackForest(const CompiledGrammar* g) : g_(g) {}
  int32_t node(int32_t item, int32_t parent);
  int32_t item(int32_t n) const { return nodes_[n].item; }
  int32_t parent(int32_t n) const { return nodes_[n].parent; }
  // Bytes this stack needs at the least before the text can end.
  int64_t min_complete(int32_t n) const;

  // Stacks whose top reads a byte, reached from a node without reading one.
  struct Closure {
    std::vector<int32_t> tops;
    bool accept = false;   // the root can end here
    bool unknown = false;  // a frame returned to kUnknown
    void clear() {
      tops.clear();
      accept = unknown = false;
    }
  };
  void close(int32_t n, Closure* out);
  void close(const std::vector<int32_t>& nodes, Closure* out);
  // The closures of the tops that take `byte` (each node's closure per byte
  // is computed once and kept).
  void step(const std::vector<int32_t>& tops, uint8_t byte, Closure* out);
  size_t size() const { return nodes_.size(); }

 private:
  struct Node {
    int32_t item, parent;
    int64_t below;  // bytes the frames beneath need after this one returns
  };
  void close_into(int32_t n, Closure* out);
  // The closure of node n after `byte` (empty when its set lacks the byte).
  int32_t step_one(int32_t n, uint8_t byte);

  const CompiledGrammar* g_;
  std::vector<Node> nodes_;
  std::vector<int32_t> row_of_;                  // node -> its row in rows_, or -1
  std::vector<std::array<int32_t, 256>> rows_;   // per byte: an index into closures_, or -1
  std::vector<Closure> closures_;
  std::unordered_map<uint64_t, int32_t> index_;
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
};

class CompiledGrammar {
 public:
  // Errors name what the matcher cannot run (left recursion, an empty
  // language, a rule without alternatives).
  static StatusOr<std::shared_ptr<const CompiledGrammar>> compile(const Grammar& grammar,
                                                                   std::shared_ptr<const TokenVocabulary> vocab);

  enum Kind : uint8_t { kTerminal, kRef, kEnd };
  Kind kind(int32_t item) const { return static_cast<Kind>(kind_[item]); }
  int32_t symbol(int32_t item) const { return symbol_[item]; }
  int32_t rule_of(int32_t item) const { return rule_of_[item]; }
  const ByteSet& byte_set(int32_t id) const { return grammar_.sets[id]; }
  const std::vector<int32_t>& starts(int32_t rule) const { return starts_[rule]; }
  int64_t min_bytes(int32_t item) const { return min_bytes_[item]; }
  int32_t root() const { return grammar_.root; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  const Grammar& grammar() const { return grammar_; }

  struct TokenClasses {
    std::vector<uint64_t> accepted;  // bits over the vocabulary
    std::vector<int32_t> uncertain;
    // Per accepted token, the fewest bytes before the end after it, less
    // what the frames beneath the known ones need (kNeedUnknown: it popped
    // into them); start_need: the same before it.
    std::vector<uint16_t> need;
    int64_t start_need = 0;
    // The accepted tokens whose need is known (bits), the largest such
    // need, and the accepted ones whose need is not.
    std::vector<uint64_t> known_need;
    uint16_t max_need = 0;
    std::vector<int32_t> unknown_need;
  };
  static constexpr uint16_t kNeedUnknown = 0xFFFF;
  // Frames of a stack's top that key the classes: the top item (a
  // terminal), then the items of the frames beneath (references), ending in
  // kAcceptBelow when the stack ends there.
  static constexpr int kTopFrames = 6;
  static constexpr int32_t kAcceptBelow = -1;
  // Computed on first use (thread-safe), then kept: up to kMaxClasses
  // tops per grammar (about 300 KB each on a 129K vocabulary), the oldest
  // dropped past that and computed again if reached again.
  static constexpr size_t kMaxClasses = 256;
  std::shared_ptr<const TokenClasses> classes(const std::vector<int32_t>& top) const;
  int64_t num_classified() const;
  int64_t num_items() const { return static_cast<int64_t>(kind_.size()); }

 private:
  CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocabulary> vocab) : grammar_(std::move(g)), vocab_(std::move(vocab)) {}
  Status analyze();
  // The stack node of a top's known frames (its top item over the frames
  // it names, extended by the rules they return to alone), in `forest`,
  // and the bytes that may follow the deepest known rule.
  int32_t known_start(const std::vector<int32_t>& top, StackForest* forest, const ByteSet** follow) const;
  // Walks the whole vocabulary trie from the top's known frames.
  std::unique_ptr<TokenClasses> classify(const std::vector<int32_t>& top) const;
  // Fills the known / unknown need split of classes just computed.
  void split_needs(TokenClasses* out) const;

  Grammar grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::vector<uint8_t> kind_;
  std::vector<int32_t> symbol_, rule_of_;
  std::vector<int64_t> min_bytes_;
  std::vector<std::vector<int32_t>> starts_;
  // Per rule: the only item referring to it that it returns past (-1: more
  // than one place, or the end of the text), and the bytes that may follow
  // it anywhere.
  std::vector<int32_t> return_ref_;
  std::vector<uint8_t> returns_to_accept_only_;
  std::vector<ByteSet> follow_;

  mutable std::mutex mu_;
  mutable std::map<std::vector<int32_t>, std::shared_ptr<const TokenClasses>> classes_;
  mutable std::deque<std::vector<int32_t>> classified_;  // the keys of classes_, oldest first
};

}  // namespace dsv4
