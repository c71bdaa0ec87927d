// The one parallel primitive: parallel_for over [0, n) on a fixed pool.
// Ops split work with it; nothing else in src/ starts threads for compute.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/phase_timer.h"
#include "base/work_meter.h"

namespace dsv4 {

// What a simulated pool (ThreadPool::simulated) reports of each job: its
// tiles, in order, each with the thread CPU time it took here. Calls come
// from the one thread that runs the job. It meters the weights read in its
// jobs' tiles and in the pool's calls that ran inline.
class JobObserver : public WorkMeter, public PhaseListener {
 public:
  virtual ~JobObserver() = default;
  virtual void job_begins(int64_t tiles) = 0;
  virtual void tile_begins(int64_t index) = 0;
  virtual void tile_ends(double cpu_seconds) = 0;
  virtual void job_ends() = 0;
};

class ThreadPool {
 public:
  // on_start(i) runs first in worker thread i (1 .. num_threads - 1; the
  // caller is thread 0), e.g. to pin it to a core.
  explicit ThreadPool(int num_threads, std::function<void(int)> on_start = nullptr);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // A pool of `logical_workers` that exist only in a simulation of a bigger
  // machine: parallel_for splits work into the tiles that many threads
  // would get, runs them one after another on the calling thread and tells
  // `observer` (not owned) what each cost. The numbers are the same as on
  // a real pool: tiles only choose who computes what.
  static std::unique_ptr<ThreadPool> simulated(int logical_workers, JobObserver* observer);

  int num_threads() const { return observer_ ? logical_workers_ : static_cast<int>(workers_.size()) + 1; }
  // Jobs this pool has handed its workers so far (each a wake-up and a
  // join), and parallel_for calls in all (the rest ran inline).
  int64_t jobs() const { return jobs_.load(std::memory_order_relaxed); }
  int64_t calls() const { return calls_.load(std::memory_order_relaxed); }

  // Calls fn(begin, end) on disjoint ranges covering [0, n), each at least
  // `grain` items (one call of all n when n is fewer) and at most
  // kChunksPerThread a thread, their sizes within one of each other; the
  // calling thread takes part. Nested calls run inline.
  static constexpr int64_t kChunksPerThread = 4;
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool (DSV4_NUM_THREADS or the hardware count).
  static ThreadPool& global();
  // The pool parallel_for uses on this thread: the one a Scope installed
  // (a rank's own, on its NUMA node's cores), else global().
  static ThreadPool& current();
  // Installs `pool` for this thread until the scope ends.
  class Scope {
   public:
    explicit Scope(ThreadPool* pool);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ThreadPool* previous_;
    PhaseListener* previous_listener_;
  };

 private:
  void worker_loop(int index);
  // Claims and runs chunks of job `generation` until none are left.
  void run_chunks(uint64_t generation);
  void run_simulated(int64_t n, int64_t chunks, const std::function<void(int64_t, int64_t)>& fn);

  JobObserver* observer_ = nullptr;
  int logical_workers_ = 1;
  class OtherWorkers;
  std::unique_ptr<OtherWorkers> others_;  // a simulated pool's

  std::vector<std::thread> workers_;
  std::mutex mu_;         // only for sleeping and waking; chunks are claimed without it
  std::mutex submit_mu_;  // one job at a time; other callers run theirs inline
  std::condition_variable wake_, done_;
  // The running job. Written before claim_ publishes it and read only by a
  // thread holding a claimed chunk, which the job cannot end without.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, num_chunks_ = 0;
  // Chunks left to claim (high 32 bits, signed) and the job's generation
  // (low 32): a claim is one compare-and-swap, and a thread still looking
  // for chunks of an ended job fails it instead of taking a chunk of the
  // next one. With a mutex a chunk, 64-128 threads queued on one lock.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> chunks_done_{0};
  std::atomic<uint64_t> generation_{0};  // bumped under mu_, spun on without it
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> jobs_{0}, calls_{0};
};

inline void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  ThreadPool::current().parallel_for(n, grain, fn);
}

// The grain of work that streams `item_bytes` bytes an item (a conversion
// or a sum of rows): at least kStreamTaskBytes a task, so that each task
// pays for its share of a job's wake-up, and at least one item. A decode
// batch's 16 rows of 16-64 KiB each, at a grain of 16 rows, were one task:
// done on the rank's thread while every other worker waited.
inline constexpr int64_t kStreamTaskBytes = int64_t{64} << 10;
inline int64_t stream_grain(int64_t item_bytes) {
  return item_bytes >= kStreamTaskBytes ? 1 : kStreamTaskBytes / (item_bytes > 0 ? item_bytes : 1);
}

// Work over `rows` rows of `width` values in pieces of `piece` values, at
// least `grain` pieces a task: fn(row, begin, end) for each piece. For
// elementwise steps, whose values do not depend on how a row is cut.
template <class Fn>
void parallel_for_pieces(int64_t rows, int64_t width, int64_t piece, int64_t grain, Fn fn) {
  const int64_t pieces = (width + piece - 1) / piece;
  parallel_for(rows * pieces, grain, [&](int64_t a, int64_t b) {
    for (int64_t u = a; u < b; ++u) {
      const int64_t r = u / pieces, d0 = u % pieces * piece;
      fn(r, d0, d0 + piece < width ? d0 + piece : width);
    }
  });
}

// Copies `runs` runs of `bytes` bytes, run i from src(i) to dst(i): on the
// calling thread when they are under kStreamTaskBytes in all (cheaper than
// a job), else in pieces of 4 KiB, a piece a task, so that a decode batch's
// copies (hundreds of KiB) keep every worker busy briefly rather than a few
// for long.
template <class Src, class Dst>
void parallel_copy_bytes(int64_t runs, int64_t bytes, Src src, Dst dst) {
  constexpr int64_t kPiece = 4096;
  const int64_t pieces = runs * ((bytes + kPiece - 1) / kPiece);
  const int64_t grain = runs * bytes < kStreamTaskBytes ? pieces : 1;
  parallel_for_pieces(runs, bytes, kPiece, grain, [&](int64_t i, int64_t d0, int64_t d1) {
    std::memcpy(static_cast<char*>(dst(i)) + d0, static_cast<const char*>(src(i)) + d0, static_cast<size_t>(d1 - d0));
  });
}

// parallel_copy_bytes of runs of `floats` floats.
template <class Src, class Dst>
void parallel_copy(int64_t runs, int64_t floats, Src src, Dst dst) {
  parallel_copy_bytes(
      runs, floats * static_cast<int64_t>(sizeof(float)), [&](int64_t i) -> const void* { return src(i); },
      [&](int64_t i) -> void* { return dst(i); });
}

}  // namespace dsv4
