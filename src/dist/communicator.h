// Collectives among a group of ranks. The model and runtime see only this
// interface; backends: LocalCommunicator (ranks are threads of one process,
// sharing memory) and MpiCommunicator (one rank per process, OpenMPI).
//
// Reductions add the ranks' values in rank order (((x0 + x1) + x2) ...), so
// every rank gets bit-identical results and both backends agree bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/collectives.h"

namespace dsv4 {

class Communicator : public Collectives {
 public:
  // data[n] of every rank -> their sum, on every rank (rank order).
  void all_reduce_sum(float* data, int64_t n) override = 0;
  // send[bytes] of every rank -> recv[size * bytes], rank-major.
  void all_gather(const void* send, size_t bytes, void* recv) override = 0;
  // Through all_gather: the blocks padded to the largest, or gathered
  // whole, then copied into place (a backend that can place them directly
  // overrides these).
  void all_gather_v(const void* send, const std::vector<size_t>& bytes, void* recv) override;
  void all_gather_rows(const void* send, size_t rows, size_t row_bytes, void* recv, size_t recv_stride) override;
  void all_to_all_v(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                    const std::vector<size_t>& recv_bytes) override = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job now (a rank that cannot go on in step with
  // the others must not leave them waiting).
  [[noreturn]] virtual void abort(int code) = 0;
  // Collective: ranks with the same color form a group, ordered by key.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // What this rank has sent to the other ranks so far, each collective
  // counted as its direct algorithm moves the data: its block to every other
  // rank for gathers, reductions and broadcasts (from the root), each
  // destination's block for all-to-all. Messages inside one process are
  // memory copies, counted the same.
  struct Traffic {
    int64_t bytes = 0;
    int64_t collectives = 0;
  };
  Traffic traffic() const { return traffic_; }

  // send[size * chunk] summed over ranks; rank r keeps chunk r in recv[chunk].
  void reduce_scatter_sum(const float* send, int64_t chunk, float* recv);
  // Like reduce_scatter_sum for n values not divisible by size: chunks of
  // ceil(n / size), the last ones padded; rank r gets values
  // [r * chunk, min(n, (r + 1) * chunk)) and returns how many.
  int64_t reduce_scatter_sum_padded(const float* send, int64_t n, float* recv);

 protected:
  void count_sent(size_t bytes) {
    if (size() > 1) traffic_.bytes += static_cast<int64_t>(bytes), ++traffic_.collectives;
  }

 private:
  Traffic traffic_;
};

}  // namespace dsv4
