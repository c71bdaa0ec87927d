#include "grammar/grammar_cache.h"

namespace dsv4 {

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(capacity < 1 ? 1 : capacity) {}

StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCache::get(const std::string& key, const Build& build) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      ++hits_;
      return it->second->second;
    }
    ++misses_;
  }
  // Compiled outside the lock: a long compile does not hold up other
  // requests (two requests missing together both compile; one is kept).
  DSV4_ASSIGN_OR_RETURN(Grammar grammar, build());
  DSV4_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGrammar> compiled, CompiledGrammar::compile(grammar, vocab_));
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  order_.emplace_front(key, compiled);
  index_[key] = order_.begin();
  while (order_.size() > capacity_) {
    index_.erase(order_.back().first);
    order_.pop_back();
  }
  return compiled;
}

int64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace dsv4
