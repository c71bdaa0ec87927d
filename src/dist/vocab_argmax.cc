#include "dist/vocab_argmax.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dsv4 {
namespace {

struct Best {
  float logit;
  int32_t token;
};

// The first index of the largest of x[0, n) as a left-to-right scan with
// `>` finds it: a NaN is never larger, and a NaN first value stays. The
// largest value in lanes the compiler vectorizes (`a > b ? a : b` is one
// max instruction), then its first place: the scan one comparison at a
// time was 60 us of a decode step's 64K-entry vocabulary shard.
int64_t first_largest(const float* x, int64_t n) {
  if (n == 0 || std::isnan(x[0])) return 0;
  constexpr int kLanes = 16;
  float lane[kLanes];
  std::fill_n(lane, kLanes, x[0]);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
  float largest = x[0];
  for (float v : lane) largest = v > largest ? v : largest;
  for (; i < n; ++i) largest = x[i] > largest ? x[i] : largest;
  return std::find(x, x + n, largest) - x;
}

bool better(const Best& a, const Best& b) { return a.logit > b.logit || (a.logit == b.logit && a.token < b.token); }

}  // namespace

void sharded_argmax(Communicator& tp, const float* logits, int64_t rows, int64_t n, int64_t vocab_begin, int32_t* out) {
  std::vector<Best> mine(rows), all(rows * tp.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = first_largest(logits + r * n, n);
    mine[r] = {logits[r * n + i], static_cast<int32_t>(vocab_begin + i)};
  }
  tp.all_gather(mine.data(), sizeof(Best) * rows, all.data());
  for (int64_t r = 0; r < rows; ++r) {
    Best b = all[r];
    for (int k = 1; k < tp.size(); ++k)
      if (better(all[k * rows + r], b)) b = all[k * rows + r];
    out[r] = b.token;
  }
}

}  // namespace dsv4
