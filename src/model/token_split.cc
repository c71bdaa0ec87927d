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

}  // namespace dsv4
