#include "base/phase_timer.h"
#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <cstdlib>
#include <numeric>
#include <vector>

#include "base/check.h"

namespace dsv4 {
namespace {

MPI_Comm& handle(void*& p) { return *reinterpret_cast<MPI_Comm*>(&p); }

// Byte counts as MPI ints (messages beyond 2 GiB are split by the callers).
std::vector<int> as_ints(const std::vector<size_t>& v) {
  std::vector<int> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    DSV4_CHECK_MSG(v[i] <= static_cast<size_t>(INT32_MAX), "MPI message over 2 GiB");
    out[i] = static_cast<int>(v[i]);
  }
  return out;
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace

static_assert(sizeof(MPI_Comm) <= sizeof(void*), "MPI_Comm must fit the handle slot");

MpiCommunicator::MpiCommunicator(void* comm, bool owns) : comm_(comm), owns_(owns) {
  MPI_Comm_set_errhandler(handle(comm_), MPI_ERRORS_ARE_FATAL);
  MPI_Comm_rank(handle(comm_), &rank_);
  MPI_Comm_size(handle(comm_), &size_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    // One thread at a time, but not always the main one (the server's
    // engine thread drives the steps).
    MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  }
  void* p = nullptr;
  handle(p) = MPI_COMM_WORLD;
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(p, false));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Comm_free(&handle(comm_));
}

void MpiCommunicator::all_reduce_sum(float* data, int64_t n) {
  PhaseTimer::Scope time(Phase::kCommunication);
  // Gather everything and add in rank order: the same bits on every rank
  // and the same as the threads backend.
  std::vector<float> all(static_cast<size_t>(n) * size_);
  all_gather(data, sizeof(float) * n, all.data());
  for (int64_t i = 0; i < n; ++i) {
    float s = all[i];
    for (int r = 1; r < size_; ++r) s += all[static_cast<size_t>(r) * n + i];
    data[i] = s;
  }
}

void MpiCommunicator::all_gather(const void* send, size_t bytes, void* recv) {
  PhaseTimer::Scope time(Phase::kCommunication);
  DSV4_CHECK_MSG(bytes <= static_cast<size_t>(INT32_MAX), "MPI message over 2 GiB");
  count_sent(bytes * (size_ - 1));
  MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, handle(comm_));
}

void MpiCommunicator::all_to_all_v(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                                   const std::vector<size_t>& recv_bytes) {
  PhaseTimer::Scope time(Phase::kCommunication);
  const std::vector<int> sc = as_ints(send_bytes), rc = as_ints(recv_bytes);
  const std::vector<int> sd = displacements(sc), rd = displacements(rc);
  count_sent(std::accumulate(send_bytes.begin(), send_bytes.end(), size_t{0}) - send_bytes[rank_]);
  MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE, handle(comm_));
}

void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  PhaseTimer::Scope time(Phase::kCommunication);
  DSV4_CHECK_MSG(bytes <= static_cast<size_t>(INT32_MAX), "MPI message over 2 GiB");
  if (rank_ == root) count_sent(bytes * (size_ - 1));
  MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, handle(comm_));
}

void MpiCommunicator::barrier() { MPI_Barrier(handle(comm_)); }

void MpiCommunicator::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  void* p = nullptr;
  MPI_Comm_split(handle(comm_), color, key, &handle(p));
  return std::unique_ptr<Communicator>(new MpiCommunicator(p, true));
}

}  // namespace dsv4
