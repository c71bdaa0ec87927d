// UTF-8 encoding of one code point (the tokenizer's byte map, the grammar
// compilers' literals and character ranges), and the hex digits of the
// escapes (\xHH, \uHHHH) that spell code points.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4 {

inline std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// The value of `n` hex digits at text[at...]; false (and at where the
// digits stop) when fewer are there. Advances at past them.
inline bool read_hex(std::string_view text, size_t* at, int n, uint32_t* value) {
  *value = 0;
  for (int k = 0; k < n; ++k, ++*at) {
    if (*at >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[*at]))) return false;
    const char h = text[*at];
    *value = *value * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
  }
  return true;
}

}  // namespace dsv4
