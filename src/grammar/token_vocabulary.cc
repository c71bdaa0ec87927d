#include "grammar/token_vocabulary.h"

#include <algorithm>

namespace dsv4 {

TokenVocabulary::TokenVocabulary(std::vector<std::string> text, const std::vector<bool>& special, int64_t model_vocab,
                                 int32_t eos)
    : text_(std::move(text)), special_(text_.size(), 0), model_vocab_(model_vocab), eos_(eos) {
  if (static_cast<int64_t>(text_.size()) > model_vocab_) text_.resize(model_vocab_);
  special_.resize(text_.size());
  for (size_t i = 0; i < text_.size(); ++i) special_[i] = (i < special.size() && special[i]) || static_cast<int32_t>(i) == eos;
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < static_cast<int32_t>(text_.size()); ++id)
    if (is_text(id)) ids.push_back(id);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return text_[a] < text_[b]; });

  // Preorder construction: sorted texts share their common prefix with the
  // previous one; each byte past it opens a node.
  trie_.push_back(Node{});
  std::vector<int32_t> path = {0};  // the node of each depth along the previous text
  std::vector<int32_t> node_of(ids.size());
  const std::string* prev = nullptr;
  for (size_t k = 0; k < ids.size(); ++k) {
    const std::string& t = text_[ids[k]];
    max_bytes_ = std::max(max_bytes_, static_cast<int>(t.size()));
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < t.size() && (*prev)[common] == t[common]) ++common;
    path.resize(common + 1);
    for (size_t d = common; d < t.size(); ++d) {
      Node n;
      n.byte = static_cast<uint8_t>(t[d]);
      n.depth = static_cast<int32_t>(d + 1);
      trie_.push_back(n);
      path.push_back(static_cast<int32_t>(trie_.size()) - 1);
    }
    node_of[k] = path[t.size()];
    trie_tokens_.push_back(ids[k]);
    prev = &t;
  }
  // A node's tokens are consecutive in trie_tokens_ (sorted by text).
  for (Node& n : trie_) n.token_begin = n.token_end = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    Node& n = trie_[node_of[k]];
    if (n.token_end == 0) n.token_begin = static_cast<int32_t>(k);
    n.token_end = static_cast<int32_t>(k) + 1;
  }
  const int32_t count = static_cast<int32_t>(trie_.size());
  std::vector<int32_t> stack;
  for (int32_t i = 0; i < count; ++i) {
    while (!stack.empty() && trie_[stack.back()].depth >= trie_[i].depth) {
      trie_[stack.back()].end = i;
      stack.pop_back();
    }
    stack.push_back(i);
  }
  for (int32_t i : stack) trie_[i].end = count;
}

}  // namespace dsv4
