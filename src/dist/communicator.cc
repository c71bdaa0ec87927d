#include "dist/communicator.h"

#include <algorithm>
#include <cstring>

#include "base/scratch.h"
#include "base/thread_pool.h"

namespace dsv4 {

void Communicator::all_gather_v(const void* send, const std::vector<size_t>& bytes, void* recv) {
  const size_t block = *std::max_element(bytes.begin(), bytes.end());
  ScratchVector<char> padded(block), got(block * size());
  if (bytes[rank()]) std::memcpy(padded.data(), send, bytes[rank()]);
  std::fill(padded.begin() + static_cast<int64_t>(bytes[rank()]), padded.end(), 0);
  all_gather(padded.data(), block, got.data());
  std::vector<size_t> at(size() + 1, 0);
  for (int r = 0; r < size(); ++r) at[r + 1] = at[r] + bytes[r];
  // A run a rank, block bytes long, as parallel_copy_bytes cuts them; the
  // pieces past a rank's bytes are not copied.
  constexpr int64_t kPiece = 4096;
  const auto all = static_cast<int64_t>(block) * size();
  const int64_t grain = all < kStreamTaskBytes ? size() * ((static_cast<int64_t>(block) + kPiece - 1) / kPiece) : 1;
  parallel_for_pieces(size(), static_cast<int64_t>(block), kPiece, grain, [&](int64_t r, int64_t b0, int64_t b1) {
    const auto end = std::min<int64_t>(b1, static_cast<int64_t>(bytes[r]));
    if (end > b0) std::memcpy(static_cast<char*>(recv) + at[r] + b0, got.data() + r * block + b0, end - b0);
  });
}

void Communicator::all_gather_rows(const void* send, size_t rows, size_t row_bytes, void* recv, size_t recv_stride) {
  ScratchVector<char> got(rows * row_bytes * size());
  all_gather(send, rows * row_bytes, got.data());
  // Run u is row u / size's part from rank u % size.
  parallel_copy_bytes(
      static_cast<int64_t>(rows) * size(), static_cast<int64_t>(row_bytes),
      [&](int64_t u) -> const void* { return got.data() + (u % size() * rows + u / size()) * row_bytes; },
      [&](int64_t u) -> void* { return static_cast<char*>(recv) + u / size() * recv_stride + u % size() * row_bytes; });
}

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
