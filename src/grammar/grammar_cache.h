// Compiled grammars by their source, shared by every request that sends
// the same schema, regex or grammar: compiling is done once, and the token
// classes a grammar computes as requests reach new states stay with it.
// Least recently used entries go first when the cache is full.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "grammar/compiled_grammar.h"

namespace dsv4 {

class GrammarCache {
 public:
  // capacity: grammars kept (each holds up to CompiledGrammar::kMaxClasses
  // token classes).
  GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity = 64);

  using Build = std::function<StatusOr<Grammar>()>;
  // The grammar compiled under `key` (its kind and source text), built and
  // compiled on a miss. Errors are not cached.
  StatusOr<std::shared_ptr<const CompiledGrammar>> get(const std::string& key, const Build& build);

  const TokenVocabulary& vocab() const { return *vocab_; }
  int64_t hits() const;
  int64_t misses() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace dsv4
