#include "model/token_split.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/scratch.h"
#include "base/thread_pool.h"

namespace dsv4 {
namespace {

// memcpy of n floats; an empty block may come with a null pointer.
void copy_floats(float* dst, const float* src, int64_t n) {
  if (n > 0) std::memcpy(dst, src, sizeof(float) * n);
}

// Row r of each of `blocks` blocks of `rows` rows of `width` floats in src
// (block-major) -> dst row r, the blocks side by side: the layout a
// gather of columns makes. In parallel: a prefill chunk moves hundreds of
// MiB here, a decode batch hundreds of KiB.
void interleave_blocks(const float* src, int blocks, int64_t rows, int64_t width, float* dst) {
  parallel_copy(
      rows * blocks, width, [&](int64_t i) { return src + (i % blocks * rows + i / blocks) * width; },
      [&](int64_t i) { return dst + i * width; });
}

}  // namespace

void gather_rows(Collectives* group, const TokenSplit& s, const float* mine, int64_t width, float* all) {
  if (s.size == 1) {
    copy_floats(all, mine, s.rows * width);
    return;
  }
  // Rank r's rows are rows [begin(r), begin(r) + count(r)) of all.
  std::vector<size_t> bytes(s.size);
  for (int r = 0; r < s.size; ++r) bytes[r] = sizeof(float) * s.count(r) * width;
  group->all_gather_v(mine, bytes, all);
}

void gather_columns(Collectives* group, const TokenSplit& s, const float* cols, int64_t width, float* all) {
  if (s.size == 1) {
    copy_floats(all, cols, s.rows * width);
    return;
  }
  group->all_gather_rows(cols, s.rows, sizeof(float) * width, all, sizeof(float) * width * s.size);
}

void columns_to_rows(Collectives* group, const TokenSplit& s, const float* cols, int64_t width, float* mine) {
  if (s.size == 1) {
    copy_floats(mine, cols, s.rows * width);
    return;
  }
  // Rank r's rows are contiguous in cols, so the send buffer is cols itself.
  std::vector<size_t> send(s.size), recv(s.size);
  for (int r = 0; r < s.size; ++r) {
    send[r] = sizeof(float) * s.count(r) * width;
    recv[r] = sizeof(float) * s.count() * width;
  }
  ScratchVector<float> got(s.count() * width * s.size);
  group->all_to_all_v(cols + s.begin(0) * width, send, got.data(), recv);
  interleave_blocks(got.data(), s.size, s.count(), width, mine);
}

void linear_columns(const kernels::Kernels& k, const Linear& w, Collectives* group, const float* x, int64_t rows,
                    float* out) {
  if (!group || group->size() == 1) {
    linear_forward(k, w, x, rows, out);
    return;
  }
  ScratchVector<float> mine(rows * w.out);
  linear_forward(k, w, x, rows, mine.data());
  gather_columns(group, TokenSplit::of(rows, group), mine.data(), w.out, out);
}

void linear_columns_all(const kernels::Kernels& k, Collectives* group, const std::vector<LinearProduct>& columns,
                        const std::vector<LinearProduct>& local) {
  std::vector<LinearProduct> all = local;
  const bool split = group && group->size() > 1;
  std::vector<ScratchVector<float>> mine(split ? columns.size() : 0);
  for (size_t i = 0; i < columns.size(); ++i) {
    LinearProduct p = columns[i];
    if (split) {
      mine[i].resize(p.m * p.layer->out);
      p.y = mine[i].data();
    }
    all.push_back(p);
  }
  linear_forward_all(k, all);
  for (size_t i = 0; split && i < columns.size(); ++i)
    gather_columns(group, TokenSplit::of(columns[i].m, group), mine[i].data(), columns[i].layer->out, columns[i].y);
}

void reduce_scatter_rows(Collectives* group, const TokenSplit& s, const float* all, int64_t width, float* mine) {
  const int64_t n = s.count() * width;
  if (s.size == 1) {
    copy_floats(mine, all, n);
    return;
  }
  std::vector<size_t> send(s.size), recv(s.size, sizeof(float) * n);
  for (int r = 0; r < s.size; ++r) send[r] = sizeof(float) * s.count(r) * width;
  ScratchVector<float> got(n * s.size);
  group->all_to_all_v(all + s.begin(0) * width, send, got.data(), recv);
  parallel_for(s.count(), stream_grain(sizeof(float) * width * s.size), [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * width; i < r1 * width; ++i) {
      float sum = got[i];
      for (int r = 1; r < s.size; ++r) sum += got[r * n + i];
      mine[i] = sum;
    }
  });
}

}  // namespace dsv4
