#include "model/indexer.h"

#include <algorithm>
#include <cmath>

#include "base/scratch.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "ops/topk.h"

namespace dsv4 {

void indexer_select(const kernels::Kernels& k, const IndexerShape& s, const float* q, const float* weights, const uint8_t* const* keys,
                    int64_t start_pos, int64_t n, int64_t prefill_len, Collectives* tp,
                    std::vector<std::vector<int32_t>>* selected) {
  // Per query row i, compressed row j and head h: relu(q . k) * weight.
  std::vector<int64_t> offset(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) offset[i + 1] = offset[i] + (start_pos + i + 1) / s.ratio * s.heads;
  ScratchVector<float> terms(offset[n]);
  parallel_for(n, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scratch(kernels::head_dots_scratch(s.heads, s.head_dim));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t visible = (start_pos + i + 1) / s.ratio;
      float* t = terms.data() + offset[i];
      k.head_dots(q + i * s.heads * s.head_dim, s.heads, keys, visible, s.head_dim, scratch.data(), t);
      for (int64_t j = 0; j < visible; ++j)
        for (int h = 0; h < s.heads; ++h) t[j * s.heads + h] = std::max(t[j * s.heads + h], 0.0f) * weights[i * s.heads + h];
    }
  });
  const int ranks = tp ? tp->size() : 1;
  ScratchVector<float> all;
  if (ranks > 1) {
    all.resize(terms.size() * ranks);
    tp->all_gather(terms.data(), sizeof(float) * terms.size(), all.data());
  }
  const float* by_rank = ranks > 1 ? all.data() : terms.data();
  selected->assign(n, {});
  parallel_for(n, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> score;
    std::vector<int32_t> top;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t pos = start_pos + i, visible = (pos + 1) / s.ratio;
      const int64_t ranked = pos < prefill_len ? prefill_len / s.ratio : visible;
      score.assign(ranked, -INFINITY);
      for (int64_t j = 0; j < visible; ++j) {
        float acc = 0.0f;  // heads in global order: rank-major blocks
        for (int r = 0; r < ranks; ++r)
          for (int h = 0; h < s.heads; ++h) acc += by_rank[r * terms.size() + offset[i] + j * s.heads + h];
        score[j] = acc;
      }
      const int64_t k = std::min<int64_t>(s.topk, ranked);
      top.resize(k);
      topk_like_torch(score.data(), ranked, k, top.data());
      auto& out = (*selected)[i];
      for (int32_t j : top) out.push_back(j < visible ? j : -1);
    }
  });
}

}  // namespace dsv4
