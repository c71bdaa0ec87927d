// The tokenizer of checkpoints that ship none (the synthetic models): ids
// below 256 are the bytes themselves, higher ids read as "<|id|>".
#pragma once

#include "tokenizer/tokenizer.h"

namespace dsv4 {

class ByteTokenizer : public Tokenizer {
 public:
  explicit ByteTokenizer(int64_t vocab_size) : vocab_size_(vocab_size) {}
  // Bytes at or above the vocabulary size (tiny vocabularies) are folded
  // into it, so any text encodes.
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string token_bytes(int32_t id) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  // Ids above the bytes are placeholders ("<|id|>"), not text.
  bool spells_text(int32_t id) const override { return id >= 0 && id < 256; }

 private:
  int64_t vocab_size_;
};

}  // namespace dsv4
