// The model's vocabulary as byte strings, for constrained decoding: each
// token's text (special tokens have none), and a byte trie over them so a
// walk through the trie shares the work of tokens with a common prefix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsv4 {

class TokenVocabulary {
 public:
  // text[id]: the token's bytes; special[id]: never text (chat markers,
  // EOS); ids at or above text.size() up to model_vocab are not text either.
  TokenVocabulary(std::vector<std::string> text, const std::vector<bool>& special, int64_t model_vocab, int32_t eos);

  int64_t size() const { return model_vocab_; }  // the mask's length
  int32_t eos() const { return eos_; }
  bool is_text(int32_t id) const { return id >= 0 && id < static_cast<int32_t>(text_.size()) && !text_[id].empty() && !special_[id]; }
  const std::string& text(int32_t id) const { return text_[id]; }
  int max_token_bytes() const { return max_bytes_; }

  // The trie in preorder: node i's subtree is [i, end); the root (node 0,
  // depth 0) is the empty prefix. Tokens whose text ends at node i are
  // tokens[token_begin, token_end).
  struct Node {
    uint8_t byte = 0;
    int32_t depth = 0;
    int32_t end = 0;
    int32_t token_begin = 0, token_end = 0;
  };
  const std::vector<Node>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }

 private:
  std::vector<std::string> text_;
  std::vector<uint8_t> special_;
  int64_t model_vocab_;
  int32_t eos_;
  int max_bytes_ = 0;
  std::vector<Node> trie_;
  std::vector<int32_t> trie_tokens_;
};

}  // namespace dsv4
