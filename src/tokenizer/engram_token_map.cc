#include "tokenizer/engram_token_map.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <unordered_map>

namespace dsv4 {
namespace {

// char::is_whitespace (Unicode White_Space), what the Rust crate's Strip trims.
bool white_space(UChar32 c) { return u_hasBinaryProperty(c, UCHAR_WHITE_SPACE); }

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      const unsigned char d = s[i + k];
      if ((d & 0xC0) != 0x80) return false;
      cp = cp << 6 | (d & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are invalid
    // (from_utf8_lossy turns them into U+FFFD).
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

}  // namespace

std::string engram_fold(const std::string& utf8) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(err);
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(err);
  if (U_FAILURE(err)) return utf8;
  icu::UnicodeString s = nfd->normalize(nfkc->normalize(icu::UnicodeString::fromUTF8(utf8), err), err);
  // StripAccents: drop nonspacing marks.
  icu::UnicodeString stripped;
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    if (u_charType(c) != U_NON_SPACING_MARK) stripped.append(c);
    i += U16_LENGTH(c);
  }
  stripped.toLower(icu::Locale::getRoot());
  // [ \t\r\n]+ -> " "
  icu::UnicodeString spaced;
  bool in_run = false;
  for (int32_t i = 0; i < stripped.length(); ++i) {
    const char16_t c = stripped[i];
    const bool ws = c == u' ' || c == u'\t' || c == u'\r' || c == u'\n';
    if (ws && !in_run) spaced.append(u' ');
    if (!ws) spaced.append(c);
    in_run = ws;
  }
  // A token that is exactly one space stays one space (the sentinel the
  // reference puts around Strip); otherwise trim White_Space.
  std::string out;
  if (spaced == icu::UnicodeString(u" ")) return " ";
  int32_t begin = 0, end = spaced.length();
  while (begin < end && white_space(spaced.char32At(begin))) begin += U16_LENGTH(spaced.char32At(begin));
  while (end > begin) {
    const int32_t last = spaced.moveIndex32(end, -1);
    if (!white_space(spaced.char32At(last))) break;
    end = last;
  }
  spaced.tempSubStringBetween(begin, end).toUTF8String(out);
  return U_FAILURE(err) ? utf8 : out;
}

EngramTokenMap build_engram_token_map(const BpeTokenizer& tokenizer) {
  EngramTokenMap map;
  std::unordered_map<std::string, int32_t> ids;
  const int32_t n = static_cast<int32_t>(tokenizer.vocab_size());
  map.compressed.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    const std::string text = tokenizer.token_bytes(id);
    // A partial UTF-8 token decodes with U+FFFD: keyed by its raw vocabulary
    // string instead (a text that holds U+FFFD itself goes the same way).
    std::string key;
    if (!valid_utf8(text) || text.find("\xEF\xBF\xBD") != std::string::npos) {
      key = tokenizer.token_string(id);
    } else {
      key = engram_fold(text);
      if (key.empty()) key = text;
    }
    auto [it, fresh] = ids.emplace(key, static_cast<int32_t>(ids.size()));
    map.compressed[id] = it->second;
  }
  map.size = static_cast<int32_t>(ids.size());
  return map;
}

StatusOr<EngramTokenMap> engram_token_map(const BpeTokenizer& tokenizer, int32_t expected_size) {
  EngramTokenMap map = build_engram_token_map(tokenizer);
  if (map.size != expected_size)
    return invalid_argument("the tokenizer's Engram token map has " + std::to_string(map.size) +
                            " compressed ids, the checkpoint's config says engram_compressed_vocab_size " +
                            std::to_string(expected_size) + ": not the tokenizer this model was trained with");
  return map;
}

}  // namespace dsv4
