// DeepSeek-V4.1's Engram hashes n-grams of "compressed" token ids: tokens
// whose text folds to the same string (Unicode NFKC, then accents stripped,
// lower case, whitespace runs as one space, trimmed) share an id, so " The",
// "the" and "THE" hash alike. The map is derived from the tokenizer exactly
// as the reference's engram.py derives it with HF `tokenizers` normalizers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/bpe_tokenizer.h"

namespace dsv4 {

struct EngramTokenMap {
  std::vector<int32_t> compressed;  // token id -> compressed id, numbered by first appearance
  int32_t size = 0;                 // distinct compressed ids
};

// The folding of one token's text (its key when the text is valid UTF-8).
std::string engram_fold(const std::string& utf8);

EngramTokenMap build_engram_token_map(const BpeTokenizer& tokenizer);

// The map, checked against the size the checkpoint's config was trained
// with: every hash multiplier derives from it, so a tokenizer whose map
// differs would silently rehash every table.
StatusOr<EngramTokenMap> engram_token_map(const BpeTokenizer& tokenizer, int32_t expected_size);

}  // namespace dsv4
