// A compiled PCRE2 pattern (UTF-8, Unicode properties) and the Split
// pre-tokenizer's use of it. Patterns come from tokenizer.json, written for
// Oniguruma/ECMAScript; `\s` is widened to ECMAScript's white space (which
// also counts U+FEFF) so splits agree with the JavaScript tokenizers.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace dsv4 {

class Regex {
 public:
  static StatusOr<std::unique_ptr<Regex>> compile(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match in `text`, as [begin, end) byte offsets.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  Regex() = default;
  void* code_ = nullptr;  // pcre2_code_8
};

// Translates an ECMAScript-flavoured pattern for PCRE2 (see above).
std::string ecmascript_to_pcre2(const std::string& pattern);

}  // namespace dsv4
