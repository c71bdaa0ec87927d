// One request's pages in each cache family (plain ids; the scheduler keeps
// these without owning any tensor). Positional families index pages by
// position: ori by position / block_size, the compressed ones and idx by
// position / 128. The state families hold at most one page. -1: no page
// (not allocated yet, or released behind the window).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kv/page_layout.h"

namespace dsv4 {

struct BlockTable {
  std::array<std::vector<int32_t>, kNumCacheFamilies> pages;
  int64_t covered = 0;  // positions [0, covered) have their pages

  std::vector<int32_t>& of(CacheFamily f) { return pages[static_cast<int>(f)]; }
  const std::vector<int32_t>& of(CacheFamily f) const { return pages[static_cast<int>(f)]; }
  int64_t num_pages() const {
    int64_t n = 0;
    for (const auto& v : pages)
      for (int32_t id : v) n += id >= 0;
    return n;
  }
};

}  // namespace dsv4
