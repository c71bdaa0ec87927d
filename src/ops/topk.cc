#include "ops/topk.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace dsv4 {

void topk_like_torch(const float* values, int64_t n, int64_t k, int32_t* out) {
  if (k <= 0) return;
  using Elem = std::pair<float, int64_t>;
  std::vector<Elem> queue(n);
  for (int64_t j = 0; j < n; ++j) queue[j] = {values[j], j};
  // NaN ranks first, as in PyTorch (numpy compatibility).
  auto greater = [](const Elem& x, const Elem& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || (x.first > y.first);
  };
  if (k * 64 <= n) {
    std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), greater);
  } else {
    std::nth_element(queue.begin(), queue.begin() + k - 1, queue.end(), greater);
    std::sort(queue.begin(), queue.begin() + k - 1, greater);
  }
  for (int64_t j = 0; j < k; ++j) out[j] = static_cast<int32_t>(queue[j].second);
}

}  // namespace dsv4
