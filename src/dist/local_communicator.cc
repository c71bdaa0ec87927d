#include "base/phase_timer.h"
#include "dist/local_communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "base/check.h"
#include "base/scratch.h"

namespace dsv4 {

std::vector<std::unique_ptr<Communicator>> LocalCommunicator::create(int size) {
  DSV4_CHECK(size >= 1);
  auto world = std::make_shared<LocalWorld>(size);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<LocalCommunicator>(world, r));
  return out;
}

void LocalCommunicator::all_reduce_sum(float* data, int64_t n) {
  PhaseTimer::Scope time(Phase::kCommunication);
  LocalWorld& w = *world_;
  count_sent(sizeof(float) * n * (w.size() - 1));
  w.slots_[rank_] = data;
  barrier();
  ScratchVector<float> sum(static_cast<const float*>(w.slots_[0]), static_cast<const float*>(w.slots_[0]) + n);
  for (int r = 1; r < w.size(); ++r) {
    const float* x = static_cast<const float*>(w.slots_[r]);
    for (int64_t i = 0; i < n; ++i) sum[i] += x[i];
  }
  barrier();  // everyone has read every buffer
  if (n) std::memcpy(data, sum.data(), sizeof(float) * n);
}

void LocalCommunicator::all_gather(const void* send, size_t bytes, void* recv) {
  PhaseTimer::Scope time(Phase::kCommunication);
  LocalWorld& w = *world_;
  count_sent(bytes * (w.size() - 1));
  w.slots_[rank_] = send;
  barrier();
  for (int r = 0; r < w.size(); ++r)
    if (bytes) std::memcpy(static_cast<char*>(recv) + r * bytes, w.slots_[r], bytes);
  barrier();
}

void LocalCommunicator::all_to_all_v(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                                     const std::vector<size_t>& recv_bytes) {
  PhaseTimer::Scope time(Phase::kCommunication);
  LocalWorld& w = *world_;
  DSV4_CHECK(static_cast<int>(send_bytes.size()) == w.size() && static_cast<int>(recv_bytes.size()) == w.size());
  count_sent(std::accumulate(send_bytes.begin(), send_bytes.end(), size_t{0}) - send_bytes[rank_]);
  w.slots_[rank_] = send;
  w.sizes_[rank_] = send_bytes;
  barrier();
  size_t at = 0;
  for (int r = 0; r < w.size(); ++r) {
    // Rank r's block for me starts after its blocks for ranks before me.
    const auto& theirs = w.sizes_[r];
    const size_t offset = std::accumulate(theirs.begin(), theirs.begin() + rank_, size_t{0});
    DSV4_CHECK_MSG(theirs[rank_] == recv_bytes[r], "all_to_all_v: send and receive counts disagree");
    if (recv_bytes[r])  // an empty block may come from a null buffer
      std::memcpy(static_cast<char*>(recv) + at, static_cast<const char*>(w.slots_[r]) + offset, recv_bytes[r]);
    at += recv_bytes[r];
  }
  barrier();
}

void LocalCommunicator::abort(int code) {
  std::fprintf(stderr, "rank %d of %d: aborting the process (code %d)\n", rank_, size(), code);
  std::abort();
}

void LocalCommunicator::broadcast(void* data, size_t bytes, int root) {
  PhaseTimer::Scope time(Phase::kCommunication);
  LocalWorld& w = *world_;
  if (rank_ == root) count_sent(bytes * (w.size() - 1));
  if (rank_ == root) w.slots_[root] = data;
  barrier();
  if (rank_ != root && bytes) std::memcpy(data, w.slots_[root], bytes);
  barrier();
}

std::unique_ptr<Communicator> LocalCommunicator::split(int color, int key) {
  LocalWorld& w = *world_;
  // Everyone's (color, key), then the members of my color in key order.
  const int mine[2] = {color, key};
  std::vector<int> all(2 * w.size());
  all_gather(mine, sizeof mine, all.data());
  std::vector<std::pair<int, int>> members;  // (key, rank)
  for (int r = 0; r < w.size(); ++r)
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  std::sort(members.begin(), members.end());
  const int new_rank = static_cast<int>(std::find_if(members.begin(), members.end(),
                                                     [&](const auto& m) { return m.second == rank_; }) -
                                        members.begin());
  std::shared_ptr<LocalWorld> group;
  {
    std::lock_guard<std::mutex> lock(w.split_mu_);
    auto& slot = w.splits_[{splits_done_, color}];
    if (!slot) slot = std::make_shared<LocalWorld>(static_cast<int>(members.size()));
    group = slot;
  }
  ++splits_done_;
  barrier();
  return std::make_unique<LocalCommunicator>(group, new_rank);
}

}  // namespace dsv4
