#include "base/thread_pool.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>

namespace dsv4 {
namespace {

thread_local bool t_inside_pool = false;
thread_local ThreadPool* t_current = nullptr;

// A forward step runs hundreds of parallel_for calls microseconds apart.
// Sleeping on the condition variable between them costs a futex wait and
// wake each (expensive under a hypervisor), so a thread that is about to
// wait first spins this many pauses (tens of microseconds).
constexpr int kSpins = 4000;

// Spins until ready(), then sleeps on `cv` under `mu` until it is; whoever
// makes it true notifies `cv` holding `mu`, so the check and the sleep
// cannot miss it. The lock is taken only to sleep.
template <class Ready>
void spin_then_wait(std::mutex& mu, std::condition_variable& cv, Ready ready) {
  for (int i = 0; i < kSpins && !ready(); ++i) _mm_pause();
  if (ready()) return;
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, ready);
}

// Chunk c of n items cut into `chunks` chunks whose sizes differ by at most
// one: each holds at least n / chunks items (at least the grain), and no
// worker's last chunk is a long one while the others have none left.
int64_t chunk_begin(int64_t c, int64_t n, int64_t chunks) { return c * n / chunks; }

}  // namespace

// The thread that runs a simulated job's tiles after the first: the tiles
// the pool's other logical workers would run on their own cores. On the
// rank's thread they would stream the whole job's weights through its
// caches, and the rank's serial work after each job would find its own
// data evicted, as on the big machine it would not (there the rank's
// thread runs its own share of the tiles). One tile at a time still: the
// handoff is a lock and a wait, and the tiles run in order.
class ThreadPool::OtherWorkers {
  // Each on a CPU of its own in turn, so that its tiles do not move
  // between cores (and lose their caches) from job to job.
  static void pin_to_next_cpu() {
    static std::atomic<unsigned> next{0};
    const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(next.fetch_add(1) % cpus, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort
  }

 public:
  // Its tiles see `pool` as theirs; the observer hears only the rank's
  // thread (it reads that thread's clock), and meters the tiles' reads.
  explicit OtherWorkers(ThreadPool* pool)
      : thread_([this, pool] {
          t_current = pool;
          pin_to_next_cpu();
          std::unique_lock<std::mutex> lock(mu_);
          for (;;) {
            cv_.wait(lock, [&] { return stop_ || work_ != nullptr; });
            if (stop_) return;
            (*work_)();
            work_ = nullptr;
            cv_.notify_all();
          }
        }) {}
  ~OtherWorkers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // Runs `work` there and returns when it is done.
  void run(const std::function<void()>& work) {
    std::unique_lock<std::mutex> lock(mu_);
    work_ = &work;
    cv_.notify_all();
    cv_.wait(lock, [&] { return work_ == nullptr; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void()>* work_ = nullptr;
  bool stop_ = false;
  std::thread thread_;  // last: it starts with the rest in place
};

std::unique_ptr<ThreadPool> ThreadPool::simulated(int logical_workers, JobObserver* observer) {
  auto pool = std::make_unique<ThreadPool>(1);
  pool->observer_ = observer;
  pool->logical_workers_ = std::max(1, logical_workers);
  pool->others_ = std::make_unique<OtherWorkers>(pool.get());
  return pool;
}

void ThreadPool::run_simulated(int64_t n, int64_t chunks, const std::function<void(int64_t, int64_t)>& fn) {
  observer_->job_begins(chunks);
  auto run_tiles = [&](int64_t first, int64_t end) {
    WorkMeter::Scope metered(observer_);
    t_inside_pool = true;  // nested calls run inside their tile, as on a worker
    for (int64_t c = first; c < end; ++c) {
      observer_->tile_begins(c);
      const double t0 = thread_cpu_seconds();
      fn(chunk_begin(c, n, chunks), chunk_begin(c + 1, n, chunks));
      observer_->tile_ends(thread_cpu_seconds() - t0);
    }
    t_inside_pool = false;
  };
  run_tiles(0, 1);  // the rank's thread takes its share
  others_->run([&] { run_tiles(1, chunks); });
  observer_->job_ends();
}

ThreadPool::ThreadPool(int num_threads, std::function<void(int)> on_start) {
  for (int i = 1; i < num_threads; ++i)
    workers_.emplace_back([this, i, on_start] {
      if (on_start) on_start(i);
      worker_loop(i);
    });
}

ThreadPool& ThreadPool::current() { return t_current ? *t_current : global(); }

// A simulated pool's observer hears this thread's phase changes too.
ThreadPool::Scope::Scope(ThreadPool* pool)
    : previous_(t_current),
      previous_listener_(PhaseTimer::listen(pool && pool->observer_ ? pool->observer_ : nullptr)) {
  t_current = pool;
}

ThreadPool::Scope::~Scope() {
  t_current = previous_;
  PhaseTimer::listen(previous_listener_);
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    const char* env = std::getenv("DSV4_NUM_THREADS");
    int n = env ? std::atoi(env) : static_cast<int>(std::thread::hardware_concurrency());
    return std::max(1, n);
  }());
  return pool;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  calls_.fetch_add(1, std::memory_order_relaxed);
  grain = std::max<int64_t>(1, grain);
  // As many chunks as keep every chunk at least `grain` items, at most
  // kChunksPerThread a thread (each is a claim on one shared counter).
  const int64_t chunks = std::min<int64_t>(std::max<int64_t>(1, n / grain), num_threads() * kChunksPerThread);
  // Nested calls, and callers that find the pool busy with another thread's
  // job (ranks as threads), run their range themselves.
  if (observer_) {
    if (t_inside_pool) return fn(0, n);
    if (chunks <= 1) {
      WorkMeter::Scope metered(observer_);
      return fn(0, n);
    }
    jobs_.fetch_add(1, std::memory_order_relaxed);
    return run_simulated(n, chunks, fn);
  }
  std::unique_lock<std::mutex> submit(submit_mu_, std::defer_lock);
  if (chunks <= 1 || workers_.empty() || t_inside_pool || !submit.try_lock()) {
    fn(0, n);
    return;
  }
  jobs_.fetch_add(1, std::memory_order_relaxed);
  job_ = &fn;
  job_n_ = n;
  num_chunks_ = chunks;
  chunks_done_.store(0, std::memory_order_relaxed);
  const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
  claim_.store(static_cast<uint64_t>(num_chunks_) << 32 | static_cast<uint32_t>(generation), std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);  // a worker between its check and its sleep sees the bump
    generation_.store(generation, std::memory_order_release);
  }
  wake_.notify_all();
  // The caller works too.
  t_inside_pool = true;
  run_chunks(generation);
  t_inside_pool = false;
  const int64_t total = num_chunks_;
  spin_then_wait(mu_, done_, [&] { return chunks_done_.load(std::memory_order_acquire) == total; });
}

void ThreadPool::run_chunks(uint64_t generation) {
  for (;;) {
    uint64_t claim = claim_.load(std::memory_order_acquire);
    int64_t left = 0;
    do {
      left = static_cast<int32_t>(claim >> 32);
      if (static_cast<uint32_t>(claim) != static_cast<uint32_t>(generation) || left <= 0) return;
    } while (!claim_.compare_exchange_weak(claim, claim - (uint64_t{1} << 32), std::memory_order_acq_rel,
                                           std::memory_order_acquire));
    const int64_t total = num_chunks_, c = total - left;
    (*job_)(chunk_begin(c, job_n_, total), chunk_begin(c + 1, job_n_, total));
    if (chunks_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == total) {
      std::lock_guard<std::mutex> lock(mu_);  // the caller may be between its check and its sleep
      done_.notify_all();
    }
  }
}

void ThreadPool::worker_loop(int) {
  t_inside_pool = true;
  uint64_t seen = 0;
  for (;;) {
    // Not the lock at every job: 127 workers taking it would queue on it.
    spin_then_wait(mu_, wake_, [&] {
      return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
    });
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    run_chunks(seen);
  }
}

}  // namespace dsv4
