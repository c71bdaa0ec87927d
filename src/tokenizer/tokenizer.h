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
  virtual int32_t bos_id() const { return -1; }
  virtual int32_t eos_id() const { return -1; }
  // Whether a plain prompt (not a rendered chat) starts with BOS.
  virtual bool add_bos() const { return false; }
  // Id of a token by its text (special tokens, vocabulary entries); -1 if none.
  virtual int32_t token_id(const std::string& token) const { return -1; }
  virtual bool is_special(int32_t id) const { return false; }
  // Whether the token spells text a model may write (not a control marker
  // or a placeholder): what constrained decoding may choose inside text.
  virtual bool spells_text(int32_t id) const { return !is_special(id); }

  std::string decode(const std::vector<int32_t>& ids) const {
    std::string s;
    for (int32_t id : ids) s += token_bytes(id);
    return s;
  }
};

}  // namespace dsv4
