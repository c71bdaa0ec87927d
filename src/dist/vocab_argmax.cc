#include "dist/vocab_argmax.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/kernels.h"

namespace dsv4 {
namespace {

struct Best {
  float logit;
  int32_t token;
};

bool better(const Best& a, const Best& b) { return a.logit > b.logit || (a.logit == b.logit && a.token < b.token); }

// A vocabulary shard's row (64K logits at decode) is scanned in pieces, a
// task each (about one a thread, whole multiples of 1024 values), not whole
// on the rank's thread with its pool waiting.
constexpr int64_t kArgmaxUnit = 1024;
int64_t argmax_piece(int64_t n) {
  const int64_t per_thread = n / ThreadPool::current().num_threads();
  return std::max<int64_t>(1, (per_thread + kArgmaxUnit - 1) / kArgmaxUnit) * kArgmaxUnit;
}

// What kernels::first_largest finds in x, from each piece's first largest:
// the first piece's, then each later piece's when strictly larger, as one
// scan keeping the first strictly larger value would. A later piece
// starting with a NaN has no best of its own in first_largest's terms (it
// keeps its first value), so such a row is scanned whole.
int64_t first_largest_of_pieces(const float* x, int64_t n, int64_t piece, int64_t pieces, const int64_t* piece_best) {
  int64_t best = piece_best[0];
  for (int64_t q = 1; q < pieces; ++q) {
    const int64_t i = q * piece + piece_best[q];
    if (std::isnan(x[i])) return kernels::first_largest(x, n);
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace

void sharded_argmax(Communicator& tp, const float* logits, int64_t rows, int64_t n, int64_t vocab_begin, int32_t* out) {
  std::vector<Best> mine(rows), all(rows * tp.size());
  const int64_t piece = argmax_piece(n), pieces = std::max<int64_t>(1, (n + piece - 1) / piece);
  std::vector<int64_t> piece_best(rows * pieces);
  parallel_for(rows * pieces, 1, [&](int64_t a, int64_t b) {
    for (int64_t u = a; u < b; ++u) {
      const int64_t r = u / pieces, d0 = u % pieces * piece;
      piece_best[u] = kernels::first_largest(logits + r * n + d0, std::min(n - d0, piece));
    }
  });
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = first_largest_of_pieces(logits + r * n, n, piece, pieces, &piece_best[r * pieces]);
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
