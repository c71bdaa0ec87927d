#include "tokenizer/byte_tokenizer.h"

namespace dsv4 {

std::vector<int32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(static_cast<int32_t>(c % vocab_size_));
  return ids;
}

std::string ByteTokenizer::token_bytes(int32_t id) const {
  if (id >= 0 && id < 256) return std::string(1, static_cast<char>(id));
  return "<|" + std::to_string(id) + "|>";
}

}  // namespace dsv4
