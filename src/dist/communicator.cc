#include "dist/communicator.h"

#include <algorithm>
#include <cstring>

namespace dsv4 {

void Communicator::reduce_scatter_sum(const float* send, int64_t chunk, float* recv) {
  // Sum everything in rank order, keep this rank's chunk. (A backend may do
  // better; this keeps the rank-order guarantee.)
  std::vector<float> all(send, send + chunk * size());
  all_reduce_sum(all.data(), static_cast<int64_t>(all.size()));
  if (chunk) std::memcpy(recv, all.data() + chunk * rank(), sizeof(float) * chunk);
}

int64_t Communicator::reduce_scatter_sum_padded(const float* send, int64_t n, float* recv) {
  const int64_t chunk = (n + size() - 1) / size();
  std::vector<float> padded(chunk * size(), 0.0f);
  std::copy(send, send + n, padded.begin());
  std::vector<float> mine(chunk);
  reduce_scatter_sum(padded.data(), chunk, mine.data());
  const int64_t begin = std::min<int64_t>(n, chunk * rank()), count = std::min<int64_t>(n, begin + chunk) - begin;
  std::copy(mine.begin(), mine.begin() + count, recv);
  return count;
}

}  // namespace dsv4
