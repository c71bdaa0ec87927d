// The engine's KV cache: the seven page pools, sized from a memory budget,
// and the page bookkeeping of requests' block tables.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "kv/block_table.h"
#include "kv/page_layout.h"
#include "kv/page_pool.h"
#include "kv/page_store.h"
#include "kv/prefix_cache.h"
#include "model/sequence_cache.h"

namespace dsv4 {

struct KvCacheOptions {
  int64_t block_size = 32;            // raw tokens per ori page
  int64_t memory_bytes = 0;           // the budget; 0: memory_fraction of available memory
  double memory_fraction = 0.25;
  int64_t max_num_seqs = 64;          // sizes the state pages and the window rings
  int64_t max_num_batched_tokens = 2048;  // ring pages a step's chunks may need
  // Draft tokens a speculative step verifies (0: no speculation): the
  // compressor rings' slack (CacheGeometry::draft_slack).
  int max_draft_tokens = 0;
  // Keep computed 128-token blocks for later requests with the same prefix
  // (see PrefixCache). The forward then writes raw KV for every position
  // (a cached block needs its raw window), and a quarter of the compressed
  // blocks the budget holds may keep their raw KV pages too.
  bool enable_prefix_caching = true;
};

// What KvCacheManager::create gives for a budget (per copy), computed
// without allocating (the capacity planner's numbers are the engine's).
struct KvCachePlan {
  std::array<int64_t, kNumCacheFamilies> pages{};  // per family
  int64_t bytes = 0;           // of one copy
  int64_t token_capacity = 0;  // compressed history in tokens; -1 with no compressed layers
};

class KvCacheManager {
 public:
  // Sizes the pools from the budget (per copy) and allocates `copies` page
  // stores (one per rank of a tensor-parallel group in this process; 0 when
  // the ranks are elsewhere). If the memory cannot be had, it retries at
  // half the size (and says so) down to the minimum that still serves
  // max_num_seqs requests.
  static StatusOr<std::unique_ptr<KvCacheManager>> create(const CacheGeometry& geometry, const KvCacheOptions& options,
                                                          int copies = 1);

  // Gives `table` pages for positions [table->covered, new_len) in every
  // family, and its state pages if it has none: all of them or, when some
  // family runs out, none (false). The pages hold whatever they held; a
  // request's first chunk resets its state pages
  // (PagedSequenceCache::reset_states).
  bool allocate(BlockTable* table, int64_t new_len);
  // Prefix caching (null when off).
  PrefixCache* prefix_cache() { return prefix_.get(); }
  // Raw KV is written for every position, not just each chunk's last window.
  bool keeps_all_raw_kv() const { return prefix_ != nullptr; }
  // After a step confirms `length` processed positions: releases the ori
  // pages wholly behind the sliding window.
  void release_behind_window(BlockTable* table, int64_t length);
  void free(BlockTable* table);

  // The bytes options ask for: memory_bytes, or memory_fraction of the
  // memory available now.
  static StatusOr<int64_t> budget_of(const KvCacheOptions& options);

  // The pools a budget buys; an error when it cannot serve max_num_seqs.
  static StatusOr<KvCachePlan> plan(const CacheGeometry& geometry, const KvCacheOptions& options, int64_t budget);

  // The budget that gives exactly `compressed_pages` pages to each
  // compressed family (the rest is the fixed ring and state part).
  static StatusOr<int64_t> budget_for(const CacheGeometry& geometry, const KvCacheOptions& options,
                                      int64_t compressed_pages);

  // Compressed history the pools hold, in tokens (each request also needs
  // its window ring and state pages, reserved for max_num_seqs requests).
  int64_t token_capacity() const { return token_capacity_; }
  // What a request with `length` processed positions holds, per token.
  double bytes_per_token(int64_t length) const;
  // Pages requests hold (the prefix cache's own are not counted: they are
  // given up when needed).
  int64_t pages_in_use() const;
  int64_t bytes() const;  // of one copy
  std::string summary() const;

  PagePool& pool(CacheFamily f) { return pools_[static_cast<int>(f)]; }
  const PagePool& pool(CacheFamily f) const { return pools_[static_cast<int>(f)]; }
  const PageLayout& layout() const { return layout_; }
  PageStore& store(int copy = 0) { return *stores_.at(copy); }
  int copies() const { return static_cast<int>(stores_.size()); }

 private:
  KvCacheManager(PageLayout layout, const KvCacheOptions& options) : layout_(std::move(layout)), options_(options) {}
  // Pages a family needs to cover positions [0, len).
  int64_t pages_needed(CacheFamily f, int64_t len) const;

  PageLayout layout_;
  KvCacheOptions options_;
  std::array<PagePool, kNumCacheFamilies> pools_;
  std::vector<std::unique_ptr<PageStore>> stores_;
  std::unique_ptr<PrefixCache> prefix_;
  int64_t token_capacity_ = 0;
};

// What a request with `length` processed positions holds in `layout`'s
// pages, per token (its window ring, compressed pages and state pages).
double kv_bytes_per_token(const PageLayout& layout, int64_t length);

// A request's caches as the forward sees them: its block table over one
// rank's page store.
class PagedSequenceCache : public SequenceCache {
 public:
  PagedSequenceCache(PageStore* store, const BlockTable* table, int64_t length);
  // Empty compressor windows in the state pages (a sequence starting at 0).
  void reset_states();

  uint8_t* window_row(int layer, int64_t pos) override;
  uint8_t* compressed_row(int layer, int64_t row) override;
  uint8_t* index_row(int layer, int64_t row) override;
  CompressorStateView compressor_state(int layer) override;
  CompressorStateView index_compressor_state(int layer) override;

 private:
  uint8_t* row(CacheFamily f, int layer, int64_t page_index, int64_t row_in_page, int64_t width);
  CompressorStateView state(CacheFamily f, int layer, int64_t floats, int ratio);

  PageStore* store_;
  const PageLayout& layout_;
  const BlockTable* table_;
};

}  // namespace dsv4
