// The lightning indexer's selection: ReLU-weighted query/key scores over the
// compressed rows a query may see, and the top-k of them.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dispatch.h"
#include "model/collectives.h"

namespace dsv4 {

struct IndexerShape {
  int heads = 0;
  int head_dim = 0;
  int topk = 0;
  int ratio = 4;
};

// q: [n, heads, head_dim] (rotated and FP4-rounded), weights: [n, heads],
// keys[j]: the index key row (FP4 codes, kernels/cache_rows.h) of compressed
// row j. The query at position pos = start_pos + i sees rows
// [0, (pos + 1) / ratio); selected[i] gets the best min(topk, ranked) of the
// ranked entries (below), best first, -1 for a row the query may not see yet
// (the reference keeps those as masked attention slots).
//
// Exact score ties are broken as the reference breaks them, which depends on
// how long the score row it ranks is. Its one-shot prefill of a prompt of
// length P ranks P / ratio entries (future rows at -inf); its decode ranks the
// visible rows. So positions below prefill_len rank as in the one-shot prefill
// of a prefill_len-token prompt, later ones as in decode: the choice then
// does not depend on how a prompt is split into chunks.
//
// Under tensor parallelism (tp set) this rank holds shape.heads of the
// heads; the ranks' per-head terms are gathered and added in global head
// order, so every rank selects what one rank holding all heads would.
void indexer_select(const kernels::Kernels& k, const IndexerShape& shape, const float* q, const float* weights, const uint8_t* const* keys,
                    int64_t start_pos, int64_t n, int64_t prefill_len, Collectives* tp,
                    std::vector<std::vector<int32_t>>* selected);

// The rows of one sequence for the call below: the arguments above.
struct IndexerRows {
  const float* q;
  const float* weights;
  const uint8_t* const* keys;
  int64_t start_pos, n, prefill_len;
  std::vector<std::vector<int32_t>>* selected;
};

// Several sequences' rows at once (a decode batch): the same choices as a
// call per sequence, in the same jobs and one collective.
void indexer_select(const kernels::Kernels& k, const IndexerShape& shape, const std::vector<IndexerRows>& seqs,
                    Collectives* tp);

}  // namespace dsv4
