// Rows of one forward spread over a tensor-parallel group: rank r owns rows
// [begin(r), begin(r) + count(r)), blocks of ceil(rows / size) with the last
// ranks short (or empty) when rows do not divide. The routed experts take
// each rank's block (so no token is dispatched twice), and FlashComm1 keeps
// the residual stream in these blocks.
#pragma once

#include <algorithm>
#include <cstdint>

#include "model/collectives.h"
#include "ops/linear.h"

namespace dsv4 {

struct TokenSplit {
  int64_t rows = 0;
  int64_t block = 0;  // rows per rank, padded
  int size = 1;
  int rank = 0;

  static TokenSplit of(int64_t rows, const Collectives* group) {
    TokenSplit s;
    s.rows = rows;
    s.size = group ? group->size() : 1;
    s.rank = group ? group->rank() : 0;
    s.block = (rows + s.size - 1) / s.size;
    return s;
  }
  int64_t begin(int r) const { return std::min(rows, r * block); }
  int64_t count(int r) const { return std::min(rows, begin(r) + block) - begin(r); }
  int64_t begin() const { return begin(rank); }
  int64_t count() const { return count(rank); }
};

// mine: this rank's block [count(), width] -> all: [rows, width] on every rank.
void gather_rows(Collectives* group, const TokenSplit& split, const float* mine, int64_t width, float* all);

// cols: this rank's `width` columns (block `rank` of size * width) for every
// row [rows, width] -> all: [rows, size * width] on every rank.
void gather_columns(Collectives* group, const TokenSplit& split, const float* cols, int64_t width, float* all);

// cols as above -> mine: this rank's rows with every rank's columns
// [count(), size * width] (an all-to-all: each rank keeps its rows' share).
void columns_to_rows(Collectives* group, const TokenSplit& split, const float* cols, int64_t width, float* mine);

// A linear whose output features are split over the group (contiguous
// blocks, ColumnParallel): each rank computes its block for every row and
// the group gathers whole rows [rows, w.out * size]. Exact: every output
// feature is its own dot product. group null or of size 1: the plain linear.
void linear_columns(const kernels::Kernels& k, const Linear& w, Collectives* group, const float* x, int64_t rows,
                    float* out);
// Several such linears (`columns`, each y whole rows) and linears whose
// output stays this rank's (`local`) in one pool job (linear_forward_all),
// then the gathers.
void linear_columns_all(const kernels::Kernels& k, Collectives* group, const std::vector<LinearProduct>& columns,
                        const std::vector<LinearProduct>& local = {});

// all: this rank's [rows, width] addend -> mine: the group's sum over ranks
// (in rank order, as all_reduce_sum) of this rank's block [count(), width]:
// a reduce-scatter by rows.
void reduce_scatter_rows(Collectives* group, const TokenSplit& split, const float* all, int64_t width, float* mine);

}  // namespace dsv4
