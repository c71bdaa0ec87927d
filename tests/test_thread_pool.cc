// The one parallel primitive: every index of every job runs exactly once,
// across many back-to-back jobs (a worker still looking for chunks of an
// ended job must not take one of the next), with several threads
// submitting at once (ranks as threads: the ones that find the pool busy
// run theirs inline), nested calls, and jobs whose chunks outnumber the
// threads many times over.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "base/thread_pool.h"

namespace dsv4 {
namespace {

// Runs `jobs` jobs of sizes 1 .. 97 on `pool` and checks every index of
// each ran once.
void run_counted_jobs(ThreadPool& pool, int jobs) {
  for (int j = 0; j < jobs; ++j) {
    const int64_t n = 1 + j % 97, grain = 1 + j % 3;
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, grain, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "job " << j << " index " << i << " of " << n;
  }
}

TEST(ThreadPool, EveryIndexOnceOverManyBackToBackJobs) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    const int64_t jobs_before = pool.jobs();
    run_counted_jobs(pool, 3000);
    if (threads > 1) {
      EXPECT_GT(pool.jobs(), jobs_before) << "the workers never got a job";
    }
    EXPECT_EQ(pool.calls(), 3000);
  }
}

TEST(ThreadPool, SeveralSubmittersAtOnce) {
  ThreadPool pool(4);
  std::vector<std::thread> submitters;
  std::atomic<int> failures{0};
  for (int s = 0; s < 3; ++s)
    submitters.emplace_back([&] {
      ThreadPool::Scope scope(&pool);
      for (int j = 0; j < 500; ++j) {
        std::atomic<int64_t> sum{0};
        parallel_for(1000, 7, [&](int64_t a, int64_t b) {
          int64_t local = 0;
          for (int64_t i = a; i < b; ++i) local += i;
          sum += local;
        });
        if (sum.load() != 999 * 1000 / 2) ++failures;
      }
    });
  for (auto& t : submitters) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPool, NestedCallsRunInsideTheirChunk) {
  ThreadPool pool(3);
  ThreadPool::Scope scope(&pool);
  std::vector<std::atomic<int>> hits(40 * 30);
  parallel_for(40, 1, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i)
      parallel_for(30, 1, [&](int64_t c, int64_t d) {
        for (int64_t k = c; k < d; ++k) hits[i * 30 + k].fetch_add(1, std::memory_order_relaxed);
      });
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, WorkersThatSleptBetweenJobsWakeForTheNext) {
  ThreadPool pool(4);
  for (int round = 0; round < 3; ++round) {
    // Long enough for every worker to stop spinning and sleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::vector<std::thread::id> who(64);
    pool.parallel_for(64, 1, [&](int64_t a, int64_t b) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // 16 ms for the caller alone
      for (int64_t i = a; i < b; ++i) who[i] = std::this_thread::get_id();
    });
    std::set<std::thread::id> threads(who.begin(), who.end());
    EXPECT_FALSE(threads.contains(std::thread::id{}));
    EXPECT_GE(threads.size(), 2u) << "no worker woke for round " << round;
  }
}

// The calls' sizes: every one at least the grain (all n when n is fewer),
// within one of each other (a worker's last chunk is not a long one while
// the others have nothing left), on real pools and simulated ones.
TEST(ThreadPool, ChunksHoldTheGrainAndDifferByAtMostOne) {
  struct NullObserver : JobObserver {
    void read(const void*, int64_t) override {}
    void phase_changes(Phase, Phase) override {}
    void job_begins(int64_t) override {}
    void tile_begins(int64_t) override {}
    void tile_ends(double) override {}
    void job_ends() override {}
  } observer;
  std::vector<std::unique_ptr<ThreadPool>> pools;
  pools.push_back(std::make_unique<ThreadPool>(2));
  pools.push_back(std::make_unique<ThreadPool>(8));
  pools.push_back(ThreadPool::simulated(64, &observer));
  for (auto& pool : pools) {
    for (int64_t n : {1, 2, 4, 7, 10, 130, 257, 300, 1000, 4097}) {
      for (int64_t grain : {1, 3, 4, 16, 500}) {
        std::mutex mu;
        std::vector<int64_t> sizes;
        pool->parallel_for(n, grain, [&](int64_t a, int64_t b) {
          std::lock_guard<std::mutex> lock(mu);
          sizes.push_back(b - a);
        });
        const auto [low, high] = std::minmax_element(sizes.begin(), sizes.end());
        SCOPED_TRACE(::testing::Message() << pool->num_threads() << " threads, n " << n << " grain " << grain);
        EXPECT_GE(*low, std::min(n, grain));
        EXPECT_LE(*high - *low, 1);
        EXPECT_LE(static_cast<int64_t>(sizes.size()), 4 * pool->num_threads());
      }
    }
  }
}

}  // namespace
}  // namespace dsv4
