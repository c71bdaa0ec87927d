#include "dist/vocab_argmax.h"

#include <vector>

#include "kernels/kernels.h"

namespace dsv4 {
namespace {

struct Best {
  float logit;
  int32_t token;
};

bool better(const Best& a, const Best& b) { return a.logit > b.logit || (a.logit == b.logit && a.token < b.token); }

}  // namespace

void sharded_argmax(Communicator& tp, const float* logits, int64_t rows, int64_t n, int64_t vocab_begin, int32_t* out) {
  std::vector<Best> mine(rows), all(rows * tp.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = kernels::first_largest(logits + r * n, n);
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
