// Text <-> token ids. Byte-level: every token stands for a byte string
// (special tokens for their text), so decoding concatenates bytes and the
// incremental detokenizer can cut at UTF-8 boundaries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsv4 {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  virtual std::string token_bytes(int32_t id) const = 0;
  virtual int64_t vocab_size() const = 0;

  std::string decode(const std::vector<int32_t>& ids) const {
    std::string s;
    for (int32_t id : ids) s += token_bytes(id);
    return s;
  }
};

}  // namespace dsv4
