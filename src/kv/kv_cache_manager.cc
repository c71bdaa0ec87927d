#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <new>
#include <sstream>

#include "base/check.h"
#include "base/logging.h"

namespace dsv4 {
namespace {

constexpr CacheFamily kAllFamilies[] = {CacheFamily::kOri,      CacheFamily::kCmpC4,          CacheFamily::kCmpC128,
                                        CacheFamily::kIdx,      CacheFamily::kCsaState,       CacheFamily::kCsaInnerState,
                                        CacheFamily::kHcaState, CacheFamily::kDSparkRing};

bool is_state(CacheFamily f) {
  return f == CacheFamily::kCsaState || f == CacheFamily::kCsaInnerState || f == CacheFamily::kHcaState;
}

bool is_compressed(CacheFamily f) {
  return f == CacheFamily::kCmpC4 || f == CacheFamily::kCmpC128 || f == CacheFamily::kIdx;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// MemAvailable from /proc/meminfo, in bytes (0 if unknown).
int64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / 1073741824.0);
  return buf;
}

}  // namespace

namespace {

// The budget-independent part of the cache, in bytes: state pages and the
// window rings for max_num_seqs requests (a ring holds the window plus a
// chunk's last window positions), and the bytes of one page of each
// compressed family together.
struct FixedCost {
  int64_t ring_pages = 0;
  int64_t fixed_bytes = 0;
  int64_t per_compressed_page = 0;
  int64_t cached_ori_per_compressed_page_x4 = 0;  // ori pages per 4 compressed pages (prefix caching)
};

FixedCost fixed_cost(const PageLayout& layout, const KvCacheOptions& o) {
  auto pf = [&](CacheFamily f) { return layout.family(f).page_bytes; };
  FixedCost c;
  // Per request: the window before a step's chunk and the chunk's last
  // window positions, plus the positions speculative rows may reach.
  c.ring_pages = o.max_num_seqs * (2 * (ceil_div(layout.geometry.window, o.block_size) + 1) +
                                   ceil_div(2 * layout.geometry.draft_slack + 1, o.block_size));
  if (o.enable_prefix_caching) {
    // Every position of a step's chunks gets raw KV, and a quarter of the
    // compressed blocks may keep theirs.
    c.ring_pages += ceil_div(o.max_num_batched_tokens, o.block_size) + o.max_num_seqs;
    c.cached_ori_per_compressed_page_x4 = kBlockTokens / o.block_size;
  }
  // The window families hold as many pages each.
  const int64_t window_page = pf(CacheFamily::kOri) + pf(CacheFamily::kDSparkRing);
  c.fixed_bytes =
      o.max_num_seqs * (pf(CacheFamily::kCsaState) + pf(CacheFamily::kCsaInnerState) + pf(CacheFamily::kHcaState)) +
      c.ring_pages * window_page;
  c.per_compressed_page = pf(CacheFamily::kCmpC4) + pf(CacheFamily::kCmpC128) + pf(CacheFamily::kIdx) +
                          c.cached_ori_per_compressed_page_x4 * window_page / 4;
  return c;
}

}  // namespace

StatusOr<int64_t> KvCacheManager::budget_of(const KvCacheOptions& o) {
  if (o.memory_bytes > 0) return o.memory_bytes;
  const int64_t avail = available_memory();
  if (avail <= 0) return internal_error("cannot read the available memory; pass --kv-cache-memory");
  return static_cast<int64_t>(avail * o.memory_fraction);
}

StatusOr<int64_t> KvCacheManager::budget_for(const CacheGeometry& geometry, const KvCacheOptions& o,
                                             int64_t compressed_pages) {
  DSV4_ASSIGN_OR_RETURN(PageLayout layout, PageLayout::of(geometry, o.block_size));
  const FixedCost c = fixed_cost(layout, o);
  return c.fixed_bytes + compressed_pages * c.per_compressed_page;
}

StatusOr<KvCachePlan> KvCacheManager::plan(const CacheGeometry& geometry, const KvCacheOptions& o, int64_t budget) {
  DSV4_ASSIGN_OR_RETURN(PageLayout layout, PageLayout::of(geometry, o.block_size));
  if (o.max_num_seqs <= 0) return invalid_argument("max-num-seqs must be positive");
  auto pf = [&](CacheFamily f) { return layout.family(f).page_bytes; };
  const FixedCost cost = fixed_cost(layout, o);
  const int64_t min_bytes = cost.fixed_bytes + o.max_num_seqs * cost.per_compressed_page;
  if (budget < min_bytes)
    return invalid_argument("KV cache budget of " + gib(budget) + " is too small: " + std::to_string(o.max_num_seqs) +
                            " requests need at least " + gib(min_bytes));
  const int64_t compressed_pages = cost.per_compressed_page ? (budget - cost.fixed_bytes) / cost.per_compressed_page : 0;
  KvCachePlan plan;
  for (CacheFamily f : kAllFamilies) {
    int64_t n = 0;
    if (pf(f) == 0) n = 0;
    else if (is_window_family(f)) n = cost.ring_pages + compressed_pages * cost.cached_ori_per_compressed_page_x4 / 4;
    else if (is_state(f)) n = o.max_num_seqs;
    else n = compressed_pages;
    plan.pages[static_cast<int>(f)] = n;
    plan.bytes += n * pf(f);
  }
  plan.token_capacity = cost.per_compressed_page ? compressed_pages * kCompressedPageTokens : -1;
  return plan;
}

StatusOr<std::unique_ptr<KvCacheManager>> KvCacheManager::create(const CacheGeometry& geometry,
                                                                  const KvCacheOptions& o, int copies) {
  DSV4_ASSIGN_OR_RETURN(PageLayout layout, PageLayout::of(geometry, o.block_size));
  if (o.enable_prefix_caching && kBlockTokens % o.block_size != 0)
    return invalid_argument("prefix caching needs a block size dividing " + std::to_string(kBlockTokens) + ", got " +
                            std::to_string(o.block_size));
  DSV4_ASSIGN_OR_RETURN(int64_t budget, budget_of(o));
  auto pf = [&](CacheFamily f) { return layout.family(f).page_bytes; };
  const FixedCost cost = fixed_cost(layout, o);
  const int64_t min_bytes = cost.fixed_bytes + o.max_num_seqs * cost.per_compressed_page;
  for (;;) {
    DSV4_ASSIGN_OR_RETURN(KvCachePlan plan, KvCacheManager::plan(geometry, o, budget));
    std::unique_ptr<KvCacheManager> kv(new KvCacheManager(layout, o));
    try {
      // The stores first: they are the memory that may not be there.
      for (int i = 0; i < copies; ++i) kv->stores_.push_back(std::make_unique<PageStore>(layout, plan.pages));
      for (CacheFamily f : kAllFamilies)
        kv->pools_[static_cast<int>(f)] = PagePool(family_name(f), pf(f), plan.pages[static_cast<int>(f)]);
    } catch (const std::bad_alloc&) {
      const int64_t smaller = std::max(min_bytes, budget / 2);
      if (smaller == budget) return resource_exhausted("cannot allocate the minimal KV cache of " + gib(budget));
      log_warn("could not allocate a KV cache of " + gib(budget) + "; retrying with " + gib(smaller));
      budget = smaller;
      continue;
    }
    kv->token_capacity_ = plan.token_capacity;
    if (o.enable_prefix_caching) kv->prefix_ = std::make_unique<PrefixCache>(&kv->layout_, &kv->pools_);
    return kv;
  }
}

int64_t KvCacheManager::pages_needed(CacheFamily f, int64_t len) const {
  if (layout_.family(f).page_bytes == 0 || len <= 0) return 0;
  if (is_window_family(f)) return ceil_div(len, layout_.block_size);
  if (is_compressed(f)) return ceil_div(len, kCompressedPageTokens);
  return 1;
}

bool KvCacheManager::allocate(BlockTable* table, int64_t new_len) {
  // The forward writes raw KV only for the last window positions of a
  // chunk (every position when a prefix cache keeps blocks), so the ring
  // needs pages from there on. A table a prefix hit filled covers its
  // blocks but has no state pages yet, and its first chunk (recomputing the
  // positions before the hit) may end before the blocks do: then only the
  // states get their pages.
  const int64_t ring_from =
      (keeps_all_raw_kv() ? table->covered : std::max(table->covered, new_len - layout_.geometry.window)) /
      layout_.block_size;
  std::array<int64_t, kNumCacheFamilies> need{};
  for (CacheFamily f : kAllFamilies) {
    const auto& ids = table->of(f);
    const int64_t want = pages_needed(f, new_len);
    int64_t n = 0;
    for (int64_t p = static_cast<int64_t>(ids.size()); p < want; ++p) n += !is_window_family(f) || p >= ring_from;
    need[static_cast<int>(f)] = n;
  }
  for (CacheFamily f : kAllFamilies) {
    const int64_t n = need[static_cast<int>(f)];
    if (n > pool(f).free_pages() && prefix_) prefix_->evict(f, n);
    if (n > pool(f).free_pages()) return false;
  }
  for (CacheFamily f : kAllFamilies) {
    auto& ids = table->of(f);
    const int64_t want = pages_needed(f, new_len);
    while (static_cast<int64_t>(ids.size()) < want) {
      const int64_t p = static_cast<int64_t>(ids.size());
      ids.push_back(!is_window_family(f) || p >= ring_from ? pool(f).allocate() : -1);
      DSV4_CHECK(is_window_family(f) && p < ring_from ? ids.back() == -1 : ids.back() >= 0);
    }
  }
  table->covered = std::max(table->covered, new_len);
  return true;
}

void KvCacheManager::release_behind_window(BlockTable* table, int64_t length) {
  const int64_t needed_from = std::max<int64_t>(0, length - layout_.geometry.window + 1);
  for (CacheFamily f : kWindowFamilies) {
    auto& ids = table->of(f);
    for (int64_t p = 0; p < static_cast<int64_t>(ids.size()) && (p + 1) * layout_.block_size <= needed_from; ++p) {
      if (ids[p] >= 0) pool(f).release(ids[p]);
      ids[p] = -1;
    }
  }
}

void KvCacheManager::free(BlockTable* table) {
  for (CacheFamily f : kAllFamilies) {
    for (int32_t id : table->of(f))
      if (id >= 0) pool(f).release(id);
    table->of(f).clear();
  }
  table->covered = 0;
}

double KvCacheManager::bytes_per_token(int64_t length) const { return kv_bytes_per_token(layout_, length); }

double kv_bytes_per_token(const PageLayout& layout, int64_t length) {
  if (length <= 0) return 0.0;
  const int64_t bs = layout.block_size, w = layout.geometry.window;
  int64_t bytes = 0;
  for (CacheFamily f : kAllFamilies) {
    const int64_t page = layout.family(f).page_bytes;
    if (page == 0) continue;
    int64_t pages = 1;  // a state page
    if (is_window_family(f)) pages = (length - 1) / bs - std::max<int64_t>(0, length - w + 1) / bs + 1;
    else if (is_compressed(f)) pages = ceil_div(length, kCompressedPageTokens);
    bytes += pages * page;
  }
  return static_cast<double>(bytes) / length;
}

int64_t KvCacheManager::pages_in_use() const {
  int64_t n = 0;
  for (const PagePool& p : pools_) n += p.num_pages() - p.free_pages();
  return n - (prefix_ ? prefix_->pages_held_alone() : 0);
}

int64_t KvCacheManager::bytes() const {
  int64_t n = 0;
  for (const PagePool& p : pools_) n += p.num_pages() * p.page_bytes();
  return n;
}

std::string KvCacheManager::summary() const {
  std::ostringstream s;
  s << "KV cache " << gib(bytes()) << ": ";
  if (token_capacity_ < 0) s << "no compressed layers, window rings only";
  else s << token_capacity_ << " tokens of history";
  if (token_capacity_ >= 0) s << " (" << static_cast<int64_t>(token_capacity_ / (bytes() / 1073741824.0)) << " per GiB)";
  s << ", " << options_.max_num_seqs << " requests, " << static_cast<int64_t>(bytes_per_token(4096))
    << " bytes/token at 4K context, prefix caching " << (prefix_ ? "on" : "off") << "; pages";
  for (CacheFamily f : kAllFamilies) {
    const PagePool& p = pools_[static_cast<int>(f)];
    if (p.num_pages()) s << " " << p.name() << " " << p.num_pages();
  }
  return s.str();
}

PagedSequenceCache::PagedSequenceCache(PageStore* store, const BlockTable* table, int64_t length)
    : store_(store), layout_(store->layout()), table_(table) {
  this->length = length;
}

void PagedSequenceCache::reset_states() {
  for (CacheFamily f : {CacheFamily::kCsaState, CacheFamily::kCsaInnerState, CacheFamily::kHcaState}) {
    const FamilyLayout& fam = layout_.family(f);
    if (fam.page_bytes == 0 || table_->of(f).empty()) continue;
    for (size_t l = 0; l < fam.layer_offset.size(); ++l) {
      if (fam.layer_offset[l] < 0) continue;
      const int layer = static_cast<int>(l);
      const CompressorStateView st = f == CacheFamily::kCsaInnerState ? index_compressor_state(layer) : compressor_state(layer);
      reset_compressor_state(st, f == CacheFamily::kCsaInnerState ? layout_.geometry.layers[l].index_state_floats
                                                                 : layout_.geometry.layers[l].state_floats);
    }
  }
}

uint8_t* PagedSequenceCache::row(CacheFamily f, int layer, int64_t page_index, int64_t row_in_page, int64_t width) {
  const auto& ids = table_->of(f);
  DSV4_CHECK_MSG(page_index < static_cast<int64_t>(ids.size()) && ids[page_index] >= 0,
                 "the forward touched a position this request holds no page for");
  const int64_t offset = layout_.family(f).layer_offset[layer];
  DSV4_CHECK(offset >= 0);
  return store_->page(f, ids[page_index]) + offset + row_in_page * width;
}

uint8_t* PagedSequenceCache::window_row(int layer, int64_t pos) {
  const int64_t bs = layout_.block_size;
  return row(layout_.window_family(layer), layer, pos / bs, pos % bs, layout_.geometry.window_row_bytes);
}

uint8_t* PagedSequenceCache::compressed_row(int layer, int64_t r) {
  const CacheFamily f = layout_.compressed_family(layer);
  const int64_t per_page = layout_.family(f).rows_per_page[layer];
  return row(f, layer, r / per_page, r % per_page, layout_.geometry.compressed_row_bytes);
}

uint8_t* PagedSequenceCache::index_row(int layer, int64_t r) {
  const int64_t per_page = layout_.family(CacheFamily::kIdx).rows_per_page[layer];
  return row(CacheFamily::kIdx, layer, r / per_page, r % per_page, layout_.geometry.index_row_bytes);
}

CompressorStateView PagedSequenceCache::state(CacheFamily f, int layer, int64_t floats, int ratio) {
  float* base = reinterpret_cast<float*>(row(f, layer, 0, 0, 0));
  return {base, base + floats, layout_.geometry.compressor_slots(ratio)};
}

CompressorStateView PagedSequenceCache::compressor_state(int layer) {
  const LayerCacheShape& s = layout_.geometry.layers[layer];
  return state(s.ratio == 4 ? CacheFamily::kCsaState : CacheFamily::kHcaState, layer, s.state_floats, s.ratio);
}

CompressorStateView PagedSequenceCache::index_compressor_state(int layer) {
  return state(CacheFamily::kCsaInnerState, layer, layout_.geometry.layers[layer].index_state_floats, 4);
}

}  // namespace dsv4
