#include "runtime/token_constraint.h"

#include <algorithm>
#include <limits>

#include "base/check.h"

namespace dsv4 {

TokenConstraint::TokenConstraint(std::shared_ptr<const CompiledGrammar> grammar, std::string after)
    : matcher_(std::move(grammar)), after_(std::move(after)), active_(after_.empty()) {
  bits_.resize((matcher_.grammar().vocab().size() + 63) / 64);
}

bool TokenConstraint::mask(float* logits, int64_t remaining_tokens) {
  if (!active_) return true;
  matcher_.fill_mask(bits_.data(), remaining_tokens);
  bool any = false;
  const int64_t vocab = matcher_.grammar().vocab().size();
  constexpr float kForbidden = -std::numeric_limits<float>::infinity();
  for (int64_t w = 0; w < static_cast<int64_t>(bits_.size()); ++w) {
    const int64_t base = w * 64, end = std::min<int64_t>(base + 64, vocab);
    if (bits_[w] == 0) {
      std::fill(logits + base, logits + end, kForbidden);
      continue;
    }
    any = true;
    for (uint64_t m = ~bits_[w]; m; m &= m - 1) {
      const int64_t id = base + __builtin_ctzll(m);
      if (id >= end) break;
      logits[id] = kForbidden;
    }
  }
  return any;
}

bool TokenConstraint::starts_after(int32_t token, std::string* tail) const {
  *tail += matcher_.grammar().vocab().text(token);
  if (tail->size() > after_.size()) tail->erase(0, tail->size() - after_.size());
  return *tail == after_;
}

void TokenConstraint::take(int32_t token) {
  if (!active_) {
    active_ = starts_after(token, &tail_);
    return;
  }
  DSV4_CHECK_MSG(matcher_.accept_token(token), "token %d is outside the request's grammar", token);
}

int64_t TokenConstraint::allowed_prefix(const std::vector<int32_t>& drafts) {
  const bool was_active = active_;
  std::string tail = tail_;
  int64_t n = 0, taken = 0;
  for (; n < static_cast<int64_t>(drafts.size()); ++n) {
    if (!active_) {
      active_ = starts_after(drafts[n], &tail);
      continue;
    }
    if (!matcher_.accept_token(drafts[n])) break;
    ++taken;
  }
  matcher_.rollback(static_cast<int>(taken));
  active_ = was_active;
  return n;
}

}  // namespace dsv4
