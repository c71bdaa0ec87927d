#include "base/phase_timer.h"
#include "dist/local_communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "base/check.h"
#include "base/scratch.h"
#include "base/thread_pool.h"
#include "base/work_meter.h"

namespace dsv4 {
namespace {

// What a collective copies runs on the rank's pool, whose workers wait idle
// through it: a prefill chunk's gathers are hundreds of MiB, which one core
// copies at no more than what one core streams. Under kCopyOnThread bytes
// in all they stay on the rank's thread: a decode step's row or two, which
// one core copies in about the time a job's wake-up and join take at 64
// workers or more, and without adding to a decode layer's jobs (at batch 1
// a layer's gathered columns, 96 KiB at Flash's shapes, would be one). More
// go in pieces of kCopyPiece bytes.
constexpr size_t kCopyPiece = 4096;
constexpr size_t kCopyOnThread = size_t{128} << 10;

// One block a collective copies into this rank's buffer; `peer`: from
// another rank's.
struct Block {
  void* to;
  const void* from;
  size_t bytes;
  bool peer;
};

void copy_blocks(const std::vector<Block>& blocks) {
  std::vector<int64_t> first(blocks.size() + 1, 0);  // each block's first piece; then the count
  size_t total = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    first[i + 1] = first[i] + static_cast<int64_t>((blocks[i].bytes + kCopyPiece - 1) / kCopyPiece);
    total += blocks[i].bytes;
  }
  const int64_t pieces = first.back();
  const int64_t grain = total < kCopyOnThread ? pieces : 1;
  parallel_for(pieces, grain, [&](int64_t a, int64_t b) {
    size_t i = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), a) - first.begin()) - 1;
    int64_t local = 0, peer = 0;
    for (int64_t u = a; u < b; ++u) {
      while (u >= first[i + 1]) ++i;
      const Block& block = blocks[i];
      const size_t at = static_cast<size_t>(u - first[i]) * kCopyPiece, n = std::min(kCopyPiece, block.bytes - at);
      std::memcpy(static_cast<char*>(block.to) + at, static_cast<const char*>(block.from) + at, n);
      const auto moved = static_cast<int64_t>(n);
      local += moved;  // written here
      (block.peer ? peer : local) += moved;
    }
    meter_moved(local, peer);
  });
}

}  // namespace

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
  // Each value summed in rank order, a piece of them a task (see
  // copy_blocks).
  ScratchVector<float> sum(n);
  constexpr int64_t kPiece = kCopyPiece / sizeof(float);
  const int64_t pieces = (n + kPiece - 1) / kPiece;
  const int64_t bytes_read = static_cast<int64_t>(sizeof(float)) * n * w.size();
  parallel_for(pieces, bytes_read < static_cast<int64_t>(kCopyOnThread) ? pieces : 1, [&](int64_t a, int64_t b) {
    const int64_t i0 = a * kPiece, i1 = std::min(n, b * kPiece);
    std::copy(static_cast<const float*>(w.slots_[0]) + i0, static_cast<const float*>(w.slots_[0]) + i1, &sum[i0]);
    for (int r = 1; r < w.size(); ++r) {
      const float* x = static_cast<const float*>(w.slots_[r]);
      for (int64_t i = i0; i < i1; ++i) sum[i] += x[i];
    }
    const auto values = static_cast<int64_t>(sizeof(float)) * (i1 - i0);
    meter_moved(2 * values, (w.size() - 1) * values);  // own values read, sums written; the others' read
  });
  barrier();  // everyone has read every buffer
  copy_blocks({{data, sum.data(), sizeof(float) * n, false}});
}

void LocalCommunicator::all_gather(const void* send, size_t bytes, void* recv) {
  PhaseTimer::Scope time(Phase::kCommunication);
  LocalWorld& w = *world_;
  count_sent(bytes * (w.size() - 1));
  w.slots_[rank_] = send;
  barrier();
  std::vector<Block> blocks;
  for (int r = 0; r < w.size(); ++r)
    if (bytes) blocks.push_back({static_cast<char*>(recv) + r * bytes, w.slots_[r], bytes, r != rank_});
  copy_blocks(blocks);
  barrier();
}

void LocalCommunicator::all_gather_v(const void* send, const std::vector<size_t>& bytes, void* recv) {
  PhaseTimer::Scope time(Phase::kCommunication);
  LocalWorld& w = *world_;
  DSV4_CHECK(static_cast<int>(bytes.size()) == w.size());
  count_sent(bytes[rank_] * (w.size() - 1));
  w.slots_[rank_] = send;
  barrier();
  std::vector<Block> blocks;
  size_t at = 0;
  for (int r = 0; r < w.size(); ++r) {
    if (bytes[r]) blocks.push_back({static_cast<char*>(recv) + at, w.slots_[r], bytes[r], r != rank_});
    at += bytes[r];
  }
  copy_blocks(blocks);
  barrier();
}

void LocalCommunicator::all_gather_rows(const void* send, size_t rows, size_t row_bytes, void* recv,
                                        size_t recv_stride) {
  PhaseTimer::Scope time(Phase::kCommunication);
  LocalWorld& w = *world_;
  count_sent(rows * row_bytes * (w.size() - 1));
  w.slots_[rank_] = send;
  barrier();
  std::vector<Block> blocks;
  if (row_bytes)
    for (size_t i = 0; i < rows; ++i)
      for (int r = 0; r < w.size(); ++r)
        blocks.push_back({static_cast<char*>(recv) + i * recv_stride + r * row_bytes,
                          static_cast<const char*>(w.slots_[r]) + i * row_bytes, row_bytes, r != rank_});
  copy_blocks(blocks);
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
  std::vector<Block> blocks;
  size_t at = 0;
  for (int r = 0; r < w.size(); ++r) {
    // Rank r's block for me starts after its blocks for ranks before me.
    const auto& theirs = w.sizes_[r];
    const size_t offset = std::accumulate(theirs.begin(), theirs.begin() + rank_, size_t{0});
    DSV4_CHECK_MSG(theirs[rank_] == recv_bytes[r], "all_to_all_v: send and receive counts disagree");
    if (recv_bytes[r])  // an empty block may come from a null buffer
      blocks.push_back({static_cast<char*>(recv) + at, static_cast<const char*>(w.slots_[r]) + offset, recv_bytes[r],
                        r != rank_});
    at += recv_bytes[r];
  }
  copy_blocks(blocks);
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
  if (rank_ != root && bytes) copy_blocks({{data, w.slots_[root], bytes, true}});
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
