// Ranks as threads of one process: collectives through shared memory. A
// LocalWorld holds what the ranks of one group share; each thread uses its
// own LocalCommunicator on it.
#pragma once

#include <barrier>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "dist/communicator.h"

namespace dsv4 {

class LocalWorld {
 public:
  explicit LocalWorld(int size) : size_(size), slots_(size), sizes_(size), sync_(size) {}
  int size() const { return size_; }

 private:
  friend class LocalCommunicator;
  int size_;
  std::vector<const void*> slots_;          // each rank's published buffer
  std::vector<std::vector<size_t>> sizes_;  // each rank's published byte counts (all_to_all_v)
  std::barrier<> sync_;
  std::mutex split_mu_;
  std::map<std::pair<int64_t, int>, std::shared_ptr<LocalWorld>> splits_;  // (generation, color) -> group
};

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalWorld> world, int rank) : world_(std::move(world)), rank_(rank) {}
  // One communicator per rank of a new world of `size` threads.
  static std::vector<std::unique_ptr<Communicator>> create(int size);

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  void all_reduce_sum(float* data, int64_t n) override;
  void all_gather(const void* send, size_t bytes, void* recv) override;
  // Each rank's blocks copied straight into place from the others' buffers.
  void all_gather_v(const void* send, const std::vector<size_t>& bytes, void* recv) override;
  void all_gather_rows(const void* send, size_t rows, size_t row_bytes, void* recv, size_t recv_stride) override;
  void all_to_all_v(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                    const std::vector<size_t>& recv_bytes) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override { world_->sync_.arrive_and_wait(); }
  [[noreturn]] void abort(int code) override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  std::shared_ptr<LocalWorld> world_;
  int rank_;
  int64_t splits_done_ = 0;
};

}  // namespace dsv4
