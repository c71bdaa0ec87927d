// Prefix caching: full kBlockTokens-token blocks of token ids that requests
// have computed, keyed by a hash chain over the ids (each block's key
// covers every token before it), holding the pages with their caches: the
// compressed rows and indexer keys of the block (one page of each
// compressed family) and its raw-KV pages. A request whose tokens start
// with cached blocks takes those pages (shared, never written again: a
// request writes no row a shared page holds) and computes from the end of
// the last one, recomputing the few positions before it its compressor
// states need (CacheGeometry::prefix_replay_tokens).
//
// The cache is one more holder of the pages it keeps. Under page pressure it
// gives up the least recently used blocks nobody else holds, leaves first
// (so every cached block's ancestors stay cached).
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kv/block_table.h"
#include "kv/page_layout.h"
#include "kv/page_pool.h"

namespace dsv4 {

class PrefixCache {
 public:
  PrefixCache(const PageLayout* layout, std::array<PagePool, kNumCacheFamilies>* pools)
      : layout_(layout), pools_(pools) {}

  // The key of the block after `parent` (0 before the first block) holding
  // these kBlockTokens token ids.
  static uint64_t chain_key(uint64_t parent, const int32_t* tokens);

  // The keys of the longest run of cached blocks `tokens` starts with (at
  // most max_blocks) whose last block a request can resume after (the raw
  // KV its recomputed positions read is kept).
  std::vector<uint64_t> match(const std::vector<int32_t>& tokens, int64_t max_blocks);

  // Gives an empty table the pages of these blocks (one holder more each):
  // every block's compressed pages and the raw-KV pages a resuming request
  // reads; the table then covers the blocks' tokens.
  void attach(const std::vector<uint64_t>& keys, BlockTable* table);

  // Records block `index` of a request (following `parent`, its pages in
  // `table`) unless a block with its key is cached already. Returns its key.
  uint64_t insert(uint64_t parent, int64_t index, const int32_t* tokens, const BlockTable& table);

  // Gives up unshared blocks, least recently used leaves first, until
  // `family` has `pages` free pages or no such block is left.
  void evict(CacheFamily family, int64_t pages);
  // Drops every block (their pages stay with whoever else holds them).
  void clear();

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  // Pages only the cache holds (free once evicted), of one family or all.
  int64_t pages_held_alone(CacheFamily family) const;
  int64_t pages_held_alone() const;

 private:
  struct Block {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    std::array<std::vector<int32_t>, kNumCacheFamilies> pages;  // this block's page ids per family
    int64_t children = 0;
    uint64_t last_use = 0;
  };
  // Whether a request can resume after the last of these chained blocks.
  bool resumable_after(const std::vector<const Block*>& chain) const;
  bool shared(const Block& b) const;
  void drop(uint64_t key);
  PagePool& pool(CacheFamily f) { return (*pools_)[static_cast<int>(f)]; }

  const PageLayout* layout_;
  std::array<PagePool, kNumCacheFamilies>* pools_;
  std::unordered_map<uint64_t, Block> blocks_;
  uint64_t clock_ = 0;
};

}  // namespace dsv4
