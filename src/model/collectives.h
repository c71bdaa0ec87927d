// What the forward needs from its parallel group, as an interface the dist
// layer implements (dist sits above model). Sums are rank-ordered, so every
// rank gets the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsv4 {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  // send[bytes] of every rank -> recv[size * bytes], rank-major.
  virtual void all_gather(const void* send, size_t bytes, void* recv) = 0;
  // Rank r's send[bytes[r]] -> recv, the ranks' blocks one after another
  // in rank order (every rank passes the same bytes).
  virtual void all_gather_v(const void* send, const std::vector<size_t>& bytes, void* recv) = 0;
  // Each rank's `rows` rows of row_bytes (consecutive in send) -> recv row
  // i at i * recv_stride, rank r's part of it at r * row_bytes: each rank's
  // columns of a [rows, size * columns] tensor land in place.
  virtual void all_gather_rows(const void* send, size_t rows, size_t row_bytes, void* recv, size_t recv_stride) = 0;
  // Rank i sends send_bytes[j] bytes (consecutive in send) to rank j and
  // receives recv_bytes[j] from rank j (consecutive in recv, rank order).
  virtual void all_to_all_v(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                            const std::vector<size_t>& recv_bytes) = 0;
};

// Which slice of the tensor-parallel weights a rank holds: contiguous blocks
// of the query heads, output groups (a group shared by tp / o_groups ranks
// when there are fewer groups than ranks), indexer heads, wo_b's and the
// shared expert's output features, and the vocabulary.
struct TensorShard {
  int rank = 0;
  int size = 1;
};

// Which routed experts a rank holds: contiguous blocks of
// num_experts / size, like the reference's experts_start_idx.
struct ExpertShard {
  int rank = 0;
  int size = 1;
  bool owns(int expert, int num_experts) const { return expert / (num_experts / size) == rank; }
};

}  // namespace dsv4
