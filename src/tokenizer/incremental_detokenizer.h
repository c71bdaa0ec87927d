// A request's output text as its tokens arrive. Text is released only when
// it is final: bytes of an unfinished UTF-8 character wait for the rest, and
// a tail that could still grow into a stop string waits until it cannot.
// When a stop string appears, the text ends just before it.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace dsv4 {

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer* tokenizer, std::vector<std::string> stop);

  // The text that became final with these tokens.
  std::string add(const std::vector<int32_t>& tokens);
  // At the end of the request: everything held back (an unfinished UTF-8
  // character becomes U+FFFD).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& stop_string() const { return matched_; }

 private:
  std::string take_final();

  const Tokenizer* tokenizer_;
  std::vector<std::string> stop_;
  size_t hold_ = 0;      // longest stop string - 1: a tail this long may still match
  std::string bytes_;    // decoded bytes not yet turned into text
  std::string pending_;  // valid text not yet released (stop-string look-behind)
  bool stopped_ = false;
  std::string matched_;
};

// The longest prefix of `bytes` that is complete UTF-8; invalid bytes are
// replaced by U+FFFD. `rest` gets an unfinished trailing character.
std::string utf8_complete_prefix(const std::string& bytes, std::string* rest);

}  // namespace dsv4
