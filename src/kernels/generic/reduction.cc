#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"

namespace dsv4::kernels {
namespace {

// PyTorch's CPU sum (SumKernel.cpp) adds `rows` rows of `lanes` values into
// per-lane accumulators with a 4-level cascade: every 16 rows the level-0
// partial sums move up one level, and further up every 16^j rows. Each
// lane's order is fixed by its row index alone.
template <int kLanes, typename At>
void cascade_rows(At at, int64_t rows, float* out) {
  constexpr int kLevels = 4, kPower = 4;
  constexpr int64_t kStep = int64_t{1} << kPower, kMask = kStep - 1;
  float acc[kLevels][kLanes] = {};
  int64_t i = 0;
  while (i + kStep <= rows) {
    for (int64_t j = 0; j < kStep; ++j, ++i)
      for (int l = 0; l < kLanes; ++l) acc[0][l] += at(i * kLanes + l);
    for (int j = 1; j < kLevels; ++j) {
      for (int l = 0; l < kLanes; ++l) {
        acc[j][l] += acc[j - 1][l];
        acc[j - 1][l] = 0.0f;
      }
      if ((i & (kMask << (j * kPower))) != 0) break;
    }
  }
  for (; i < rows; ++i)
    for (int l = 0; l < kLanes; ++l) acc[0][l] += at(i * kLanes + l);
  for (int j = 1; j < kLevels; ++j)
    for (int l = 0; l < kLanes; ++l) acc[0][l] += acc[j][l];
  std::memcpy(out, acc[0], sizeof(float) * kLanes);
}

// row_sum: the values seen as rows of four items (4-way ILP), cascaded, the
// leftover items added to the first, then the four folded left to right.
// An item is one value (kWidth 1) or one 8-lane vector (kWidth 8).
template <int kWidth, typename At>
void ilp_row_sum(At at, int64_t items, float* out) {
  constexpr int kIlp = 4;
  float part[kIlp * kWidth];
  cascade_rows<kIlp * kWidth>(at, items / kIlp, part);
  for (int64_t i = items / kIlp * kIlp; i < items; ++i)
    for (int l = 0; l < kWidth; ++l) part[l] += at(i * kWidth + l);
  for (int k = 1; k < kIlp; ++k)
    for (int l = 0; l < kWidth; ++l) part[l] += part[k * kWidth + l];
  std::memcpy(out, part, sizeof(float) * kWidth);
}

// PyTorch's inner (contiguous) sum of n values given by at(i).
template <typename At>
float torch_order_sum(At at, int64_t n) {
  constexpr int kVec = 8;  // the reference ran PyTorch's AVX2 kernels
  if (n < kVec) {
    float s;
    ilp_row_sum<1>(at, n, &s);
    return s;
  }
  const int64_t vectors = n / kVec;
  float lanes[kVec];
  ilp_row_sum<kVec>(at, vectors, lanes);
  float s = 0.0f;
  for (int64_t i = vectors * kVec; i < n; ++i) s += at(i);
  for (int l = 0; l < kVec; ++l) s += lanes[l];
  return s;
}

}  // namespace

float sum(const float* x, int64_t n) {
  return torch_order_sum([x](int64_t i) { return x[i]; }, n);
}

float sum_outer(const float* x, int64_t n, int64_t stride) {
  float s;
  cascade_rows<1>([x, stride](int64_t i) { return x[i * stride]; }, n, &s);
  return s;
}

float sum_squares(const float* x, int64_t n) {
  return torch_order_sum([x](int64_t i) { return x[i] * x[i]; }, n);
}

int64_t first_largest(const float* x, int64_t n) {
  if (n <= 0 || std::isnan(x[0])) return 0;
  // The largest value four lanes at a time, four accumulators: maxps(v, m)
  // keeps m when v is NaN or not larger, the scan's `>` (baseline x86-64;
  // a vocabulary shard is 64K values at decode, 60 us scanned one by one).
  __m128 m[4];
  for (__m128& a : m) a = _mm_set1_ps(x[0]);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int a = 0; a < 4; ++a) m[a] = _mm_max_ps(_mm_loadu_ps(x + i + 4 * a), m[a]);
  float lanes[16];
  for (int a = 0; a < 4; ++a) _mm_storeu_ps(lanes + 4 * a, m[a]);
  float largest = x[0];
  for (float v : lanes) largest = v > largest ? v : largest;
  for (; i < n; ++i) largest = x[i] > largest ? x[i] : largest;
  // Its first place, four values a comparison.
  const __m128 want = _mm_set1_ps(largest);
  i = 0;
  for (; i + 4 <= n; i += 4) {
    const int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + i), want));
    if (hit) return i + __builtin_ctz(static_cast<unsigned>(hit));
  }
  return std::find(x + i, x + n, largest) - x;
}

}  // namespace dsv4::kernels
