#include "model/token_split.h"

#include <cstring>
#include <vector>

namespace dsv4 {

void gather_rows(Collectives* group, const TokenSplit& s, const float* mine, int64_t width, float* all) {
  if (s.size == 1) {
    std::memcpy(all, mine, sizeof(float) * s.rows * width);
    return;
  }
  // Every block padded to the same size, then the padding dropped.
  const int64_t block = s.block * width;
  std::vector<float> sent(block, 0.0f), got(block * s.size);
  std::memcpy(sent.data(), mine, sizeof(float) * s.count() * width);
  group->all_gather(sent.data(), sizeof(float) * block, got.data());
  for (int r = 0; r < s.size; ++r)
    std::memcpy(all + s.begin(r) * width, &got[r * block], sizeof(float) * s.count(r) * width);
}

void gather_columns(Collectives* group, const TokenSplit& s, const float* cols, int64_t width, float* all) {
  if (s.size == 1) {
    std::memcpy(all, cols, sizeof(float) * s.rows * width);
    return;
  }
  std::vector<float> got(s.rows * width * s.size);
  group->all_gather(cols, sizeof(float) * s.rows * width, got.data());
  const int64_t full = width * s.size;
  for (int r = 0; r < s.size; ++r)
    for (int64_t row = 0; row < s.rows; ++row)
      std::memcpy(all + row * full + r * width, &got[(r * s.rows + row) * width], sizeof(float) * width);
}

void columns_to_rows(Collectives* group, const TokenSplit& s, const float* cols, int64_t width, float* mine) {
  if (s.size == 1) {
    std::memcpy(mine, cols, sizeof(float) * s.rows * width);
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
      std::memcpy(mine + row * full + r * width, &got[(r * n + row) * width], sizeof(float) * width);
}

void linear_columns(const Linear& w, Collectives* group, const float* x, int64_t rows, float* out) {
  if (!group || group->size() == 1) {
    linear_forward(w, x, rows, out);
    return;
  }
  std::vector<float> mine(rows * w.out);
  linear_forward(w, x, rows, mine.data());
  gather_columns(group, TokenSplit::of(rows, group), mine.data(), w.out, out);
}

void reduce_scatter_rows(Collectives* group, const TokenSplit& s, const float* all, int64_t width, float* mine) {
  const int64_t n = s.count() * width;
  if (s.size == 1) {
    std::memcpy(mine, all, sizeof(float) * n);
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
