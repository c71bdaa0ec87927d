#include "kv/prefix_cache.h"

#include <algorithm>

#include "base/check.h"

namespace dsv4 {
namespace {

constexpr CacheFamily kCompressedFamilies[] = {CacheFamily::kCmpC4, CacheFamily::kCmpC128, CacheFamily::kIdx};

// Raw-KV pages [first, end) of the positions [begin, end_pos).
std::pair<int64_t, int64_t> ori_pages(int64_t begin, int64_t end_pos, int64_t block_size) {
  return {begin / block_size, (end_pos + block_size - 1) / block_size};
}

// The positions before a hit at `end` whose raw KV a resuming request reads:
// the window of the first position it recomputes (see
// CacheGeometry::prefix_replay_tokens) and those positions themselves.
std::pair<int64_t, int64_t> resume_pages(const PageLayout& layout, int64_t end) {
  const CacheGeometry& g = layout.geometry;
  return ori_pages(std::max<int64_t>(0, end - g.prefix_replay_tokens() - g.window), end, layout.block_size);
}

}  // namespace

uint64_t PrefixCache::chain_key(uint64_t parent, const int32_t* tokens) {
  // FNV-1a over the parent key and the ids, then a final mix; 0 is reserved
  // for "no parent". Collisions are caught by comparing the ids.
  uint64_t h = 1469598103934665603ull ^ parent;
  for (int64_t i = 0; i < kBlockTokens; ++i) {
    uint32_t t = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b, t >>= 8) h = (h ^ (t & 0xff)) * 1099511628211ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h ? h : 1;
}

std::vector<uint64_t> PrefixCache::match(const std::vector<int32_t>& tokens, int64_t max_blocks) {
  std::vector<uint64_t> keys;
  std::vector<const Block*> chain;
  size_t resumable = 0;
  uint64_t parent = 0;
  const int64_t n = std::min<int64_t>(max_blocks, static_cast<int64_t>(tokens.size()) / kBlockTokens);
  for (int64_t k = 0; k < n; ++k) {
    const int32_t* ids = tokens.data() + k * kBlockTokens;
    const uint64_t key = chain_key(parent, ids);
    auto it = blocks_.find(key);
    if (it == blocks_.end() || it->second.parent != parent || !std::equal(ids, ids + kBlockTokens, it->second.tokens.begin()))
      break;
    keys.push_back(key);
    chain.push_back(&it->second);
    if (resumable_after(chain)) resumable = keys.size();
    parent = key;
  }
  keys.resize(resumable);
  ++clock_;
  for (uint64_t key : keys) blocks_[key].last_use = clock_;
  return keys;
}

void PrefixCache::attach(const std::vector<uint64_t>& keys, BlockTable* table) {
  DSV4_CHECK(table->covered == 0);
  const int64_t bs = layout_->block_size, end = static_cast<int64_t>(keys.size()) * kBlockTokens;
  const auto [first_kept, pages_end] = resume_pages(*layout_, end);
  for (CacheFamily f : kWindowFamilies)
    if (layout_->family(f).page_bytes) table->of(f).assign(pages_end, -1);
  for (size_t k = 0; k < keys.size(); ++k) {
    const Block& b = blocks_.at(keys[k]);
    for (CacheFamily f : kCompressedFamilies) {
      if (b.pages[static_cast<int>(f)].empty()) continue;
      const int32_t id = b.pages[static_cast<int>(f)][0];
      pool(f).retain(id);
      table->of(f).push_back(id);
    }
    for (CacheFamily f : kWindowFamilies) {
      const auto& own = b.pages[static_cast<int>(f)];
      for (size_t i = 0; i < own.size(); ++i) {
        const int64_t page = static_cast<int64_t>(k) * kBlockTokens / bs + static_cast<int64_t>(i);
        if (page < first_kept || own[i] < 0) continue;
        pool(f).retain(own[i]);
        table->of(f)[page] = own[i];
      }
    }
  }
  table->covered = end;
}

uint64_t PrefixCache::insert(uint64_t parent, int64_t index, const int32_t* tokens, const BlockTable& table) {
  const uint64_t key = chain_key(parent, tokens);
  auto found = blocks_.find(key);
  if (found != blocks_.end()) {
    found->second.last_use = ++clock_;
    return key;  // computed before (or a collision, which match() refuses)
  }
  if (parent != 0 && !blocks_.count(parent)) return key;  // its chain was evicted: unreachable
  Block b;
  b.parent = parent;
  b.tokens.assign(tokens, tokens + kBlockTokens);
  b.last_use = ++clock_;
  for (CacheFamily f : kCompressedFamilies) {
    const auto& ids = table.of(f);
    if (layout_->family(f).page_bytes == 0 || index >= static_cast<int64_t>(ids.size()) || ids[index] < 0) continue;
    pool(f).retain(ids[index]);
    b.pages[static_cast<int>(f)].push_back(ids[index]);
  }
  const int64_t bs = layout_->block_size, end = (index + 1) * kBlockTokens;
  for (CacheFamily f : kWindowFamilies) {
    if (layout_->family(f).page_bytes == 0) continue;
    const auto& ids = table.of(f);
    for (int64_t p = index * kBlockTokens / bs; p < end / bs; ++p) {
      const int32_t id = p < static_cast<int64_t>(ids.size()) ? ids[p] : -1;
      if (id >= 0) pool(f).retain(id);
      b.pages[static_cast<int>(f)].push_back(id);
    }
  }
  if (parent) ++blocks_.at(parent).children;
  blocks_.emplace(key, std::move(b));
  return key;
}

bool PrefixCache::resumable_after(const std::vector<const Block*>& chain) const {
  const int64_t bs = layout_->block_size, end = static_cast<int64_t>(chain.size()) * kBlockTokens;
  const auto [first, last] = resume_pages(*layout_, end);
  for (CacheFamily f : kWindowFamilies) {
    if (layout_->family(f).page_bytes == 0) continue;
    for (int64_t p = first; p < last; ++p) {
      const auto& own = chain[p * bs / kBlockTokens]->pages[static_cast<int>(f)];
      const int64_t i = p - p * bs / kBlockTokens * kBlockTokens / bs;
      if (i >= static_cast<int64_t>(own.size()) || own[i] < 0) return false;
    }
  }
  return true;
}

bool PrefixCache::shared(const Block& b) const {
  for (int f = 0; f < kNumCacheFamilies; ++f)
    for (int32_t id : b.pages[f])
      if (id >= 0 && (*pools_)[f].holders(id) > 1) return true;
  return false;
}

void PrefixCache::drop(uint64_t key) {
  auto it = blocks_.find(key);
  Block& b = it->second;
  for (int f = 0; f < kNumCacheFamilies; ++f)
    for (int32_t id : b.pages[f])
      if (id >= 0) (*pools_)[f].release(id);
  if (b.parent) {
    auto p = blocks_.find(b.parent);
    if (p != blocks_.end()) --p->second.children;
  }
  blocks_.erase(it);
}

void PrefixCache::evict(CacheFamily family, int64_t pages) {
  while (pool(family).free_pages() < pages) {
    uint64_t victim = 0, oldest = UINT64_MAX;
    for (const auto& [key, b] : blocks_)
      if (b.children == 0 && b.last_use < oldest && !shared(b)) victim = key, oldest = b.last_use;
    if (oldest == UINT64_MAX) return;
    drop(victim);
  }
}

void PrefixCache::clear() {
  while (!blocks_.empty()) {
    std::vector<uint64_t> leaves;
    for (const auto& [key, b] : blocks_)
      if (b.children == 0) leaves.push_back(key);
    for (uint64_t key : leaves) drop(key);
  }
}

int64_t PrefixCache::pages_held_alone(CacheFamily family) const {
  const int f = static_cast<int>(family);
  int64_t n = 0;
  for (const auto& [key, b] : blocks_)
    for (int32_t id : b.pages[f]) n += id >= 0 && (*pools_)[f].holders(id) == 1;
  return n;
}

int64_t PrefixCache::pages_held_alone() const {
  int64_t n = 0;
  for (int f = 0; f < kNumCacheFamilies; ++f) n += pages_held_alone(static_cast<CacheFamily>(f));
  return n;
}

}  // namespace dsv4
