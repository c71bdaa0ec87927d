#include "tokenizer/incremental_detokenizer.h"

#include <algorithm>

namespace dsv4 {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Length of the UTF-8 sequence a lead byte starts (0: not a lead byte).
int sequence_length(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

bool valid_sequence(const unsigned char* s, int n) {
  for (int i = 1; i < n; ++i)
    if ((s[i] & 0xC0) != 0x80) return false;
  if (n == 3 && s[0] == 0xE0 && s[1] < 0xA0) return false;  // overlong
  if (n == 3 && s[0] == 0xED && s[1] > 0x9F) return false;  // surrogates
  if (n == 4 && s[0] == 0xF0 && s[1] < 0x90) return false;  // overlong
  if (n == 4 && s[0] == 0xF4 && s[1] > 0x8F) return false;  // above U+10FFFF
  return true;
}

}  // namespace

std::string utf8_complete_prefix(const std::string& bytes, std::string* rest) {
  std::string out;
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const int len = sequence_length(s[i]);
    if (len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    if (i + len > n) {
      // Unfinished at the end: keep it if what is there can still be valid.
      bool could = true;
      for (size_t k = i + 1; k < n; ++k) could &= (s[k] & 0xC0) == 0x80;
      if (could) break;
      out += kReplacement;
      ++i;
      continue;
    }
    if (!valid_sequence(s + i, len)) {
      out += kReplacement;
      ++i;
      continue;
    }
    out.append(bytes, i, len);
    i += len;
  }
  *rest = bytes.substr(i);
  return out;
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tokenizer, std::vector<std::string> stop)
    : tokenizer_(tokenizer), stop_(std::move(stop)) {
  for (const std::string& s : stop_) hold_ = std::max(hold_, s.size() - 1);
}

std::string IncrementalDetokenizer::take_final() {
  // Earliest stop string in the pending text ends the output there.
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) {
    const size_t at = pending_.find(s);
    if (at != std::string::npos && (cut == std::string::npos || at < cut)) {
      cut = at;
      matched_ = s;
    }
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    bytes_.clear();
    return out;
  }
  if (pending_.size() <= hold_) return "";
  // Keep the last hold_ bytes, without splitting a UTF-8 character.
  size_t release = pending_.size() - hold_;
  while (release > 0 && (static_cast<unsigned char>(pending_[release]) & 0xC0) == 0x80) --release;
  std::string out = pending_.substr(0, release);
  pending_.erase(0, release);
  return out;
}

std::string IncrementalDetokenizer::add(const std::vector<int32_t>& tokens) {
  if (stopped_) return "";
  for (int32_t t : tokens) bytes_ += tokenizer_->token_bytes(t);
  std::string rest;
  pending_ += utf8_complete_prefix(bytes_, &rest);
  bytes_ = rest;
  return take_final();
}

std::string IncrementalDetokenizer::flush() {
  if (stopped_) return "";
  std::string out = pending_;
  if (!bytes_.empty()) out += kReplacement;  // one unfinished character
  pending_.clear();
  bytes_.clear();
  return out;
}

}  // namespace dsv4
