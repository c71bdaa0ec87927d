#include "model/token_split.h"

#include <cstring>
#include <vector>

namespace dsv4 {
namespace {

// memcpy of n floats; an empty block may come with a null pointer.
void copy_floats(float* dst, const float* src, int64_t n) {
  if (n > 0) std::memcpy(dst, src, sizeof(float) * n);
}

}  // namespace

void gather_rows(Collectives* group, const TokenSplit& s, const float* mine, int64_t width, float* all) {
  if (s.size == 1) {
    copy_floats(all, mine, s.rows * width);
    return;
  }
  // Every block padded to the same size, then the padding dropped.
  const int64_t block = s.block * width;
  std::vector<float> sent(block, 0.0f), got(block * s.size);
  copy_floats(sent.data(), mine, s.count() * width);
  group->all_gather(sent.data(), sizeof(float) * block, got.data());
  for (int r = 0; r < s.size; ++r)
    copy_floats(all + s.begin(r) * width, got.data() + r * block, s.count(r) * width);
}

void gather_columns(Collectives* group, const TokenSplit& s, const float* cols, int64_t width, float* all) {
  if (s.size == 1) {
    copy_floats(all, cols, s.rows * width);
    return;
  }
  std::vector<float> got(s.rows * width * s.size);
  group->all_gather(cols, sizeof(float) * s.rows * width, got.data());
  const int64_t full = width * s.size;
  for (int r = 0; r < s.size; ++r)
    for (int64_t row = 0; row < s.rows; ++row)
      copy_floats(all + row * full + r * width, got.data() + (r * s.rows + row) * width, width);
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
  std::vector<float> got(s.count() * width * s.size);
  group->all_to_all_v(cols + s.begin(0) * width, send, got.data(), recv);
  const int64_t n = s.count(), full = width * s.size;
  for (int r = 0; r < s.size; ++r)
    for (int64_t row = 0; row < n; ++row)
      copy_floats(mine + row * full + r * width, got.data() + (r * n + row) * width, width);
}

void linear_columns(const kernels::Kernels& k, const Linear& w, Collectives* group, const float* x, int64_t rows,
                    float* out) {
  if (!group || group->size() == 1) {
    linear_forward(k, w, x, rows, out);
    return;
  }
  std::vector<float> mine(rows * w.out);
  linear_forward(k, w, x, rows, mine.data());
  gather_columns(group, TokenSplit::of(rows, group), mine.data(), w.out, out);
}

void reduce_scatter_rows(Collectives* group, const TokenSplit& s, const float* all, int64_t width, float* mine) {
  const int64_t n = s.count() * width;
  if (s.size == 1) {
    copy_floats(mine, all, n);
    return;
  }
  std::vector<size_t> send(s.size), recv(s.size, sizeof(float) * n);
  for (int r = 0; r < s.size; ++r) send[r] = sizeof(float) * s.count(r) * width;
  std::vector<float> got(n * s.size);
  group->all_to_all_v(all + s.begin(0) * width, send, got.data(), recv);
  for (int64_t i = 0; i < n; ++i) {
    float sum = got[i];
    for (int r = 1; r < s.size; ++r) sum += got[r * n + i];
    mine[i] = sum;
  }
}

}  // namespace dsv4
