// One rank per process over OpenMPI (mpirun starts the processes; ranks may
// live on different machines). Collectives keep the rank-order guarantee of
// Communicator, so MPI and threads give bit-identical results.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace dsv4 {

class MpiCommunicator : public Communicator {
 public:
  // MPI_Init (once per process) and the world communicator. Errors abort
  // the job instead of hanging (MPI_ERRORS_ARE_FATAL on every communicator).
  static std::unique_ptr<MpiCommunicator> world(int* argc, char*** argv);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* data, int64_t n) override;
  void all_gather(const void* send, size_t bytes, void* recv) override;
  void all_to_all_v(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                    const std::vector<size_t>& recv_bytes) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  [[noreturn]] void abort(int code) override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  explicit MpiCommunicator(void* comm, bool owns);
  void* comm_;  // MPI_Comm (an int handle in MPICH, a pointer in Open MPI)
  bool owns_;
  int rank_ = 0, size_ = 1;
};

}  // namespace dsv4
