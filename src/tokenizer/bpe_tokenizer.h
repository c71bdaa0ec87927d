// Byte-level BPE from a checkpoint's tokenizer.json (the Hugging Face
// format DeepSeek ships): added and special tokens matched first (longest
// first), the pre-tokenizer's Split regexes and byte-to-unicode mapping,
// then BPE merges by rank. BOS handling comes from tokenizer_config.json.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

class BpeTokenizer : public Tokenizer {
 public:
  // Reads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json.
  static StatusOr<std::unique_ptr<BpeTokenizer>> load(const std::string& dir);
  static StatusOr<std::unique_ptr<BpeTokenizer>> from_json_text(const std::string& tokenizer_json,
                                                                const std::string& config_json,
                                                                const std::string& source);

  std::vector<int32_t> encode(const std::string& text) const override;
  std::string token_bytes(int32_t id) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  bool add_bos() const override { return add_bos_; }
  int32_t token_id(const std::string& token) const override;
  // The vocabulary's string for id (byte-level characters; an added token's
  // content), as tokenizer.json spells it.
  const std::string& token_string(int32_t id) const { return id_to_token_.at(id); }
  bool is_special(int32_t id) const override;

 private:
  struct PreSplit {
    std::unique_ptr<Regex> regex;  // Split: the pieces are the matches and the gaps between them
    bool byte_level = false;       // ByteLevel (without its own regex)
  };
  BpeTokenizer() = default;
  // Token ids of one pre-token (already byte-level mapped).
  void bpe(const std::string& piece, std::vector<int32_t>* out) const;
  void encode_plain(const std::string& text, std::vector<int32_t>* out) const;

  std::vector<std::string> id_to_token_;         // vocab and added tokens
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left, right) -> (rank, merged)
  std::vector<std::string> added_;               // added-token contents, longest first
  std::unordered_map<std::string, int32_t> added_ids_;
  std::vector<uint8_t> special_;                 // per id
  std::vector<PreSplit> pre_;
  std::vector<int32_t> byte_token_;              // byte -> id of its byte-level symbol
  std::unordered_map<std::string, uint8_t> unicode_to_byte_;
  int32_t bos_id_ = -1, eos_id_ = -1;
  bool add_bos_ = false;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// The GPT-2 byte-level alphabet: byte b as a printable unicode character.
std::string byte_level_char(uint8_t b);

}  // namespace dsv4
