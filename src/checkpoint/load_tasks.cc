#include "checkpoint/load_tasks.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

#include "base/thread_pool.h"
#include "checkpoint/safetensors.h"

namespace dsv4 {
namespace {

// Tasks read ahead of the one being packed (about 64 MiB of file).
constexpr size_t kReadAhead = 16;

}  // namespace

void LoadTasks::add(const TensorInfo& t, uint64_t begin, uint64_t bytes, Body body) {
  tasks_.push_back({t.source, t.file, t.offset + begin, bytes, std::move(body)});
  total_bytes_ += bytes;
}

Status LoadTasks::run(const LoadProgress& progress) {
  std::stable_sort(tasks_.begin(), tasks_.end(), [](const Task& a, const Task& b) {
    return *a.file != *b.file ? *a.file < *b.file : a.offset < b.offset;
  });
  std::mutex mu;  // guards the scratch free list, the first error and progress calls
  std::vector<std::unique_ptr<LoadScratch>> free_scratch;
  Status first_error = Status::Ok();
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> done{0};
  std::atomic<size_t> next{0};
  for (size_t i = 0; i < std::min(kReadAhead, tasks_.size()); ++i)
    if (tasks_[i].source) tasks_[i].source->prefetch(tasks_[i].offset, tasks_[i].bytes);
  // Each thread claims the next task in file order, so the reads of all
  // threads together move through the files front to back.
  parallel_for(ThreadPool::current().num_threads(), 1, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) {
      std::unique_ptr<LoadScratch> scratch;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!free_scratch.empty()) {
          scratch = std::move(free_scratch.back());
          free_scratch.pop_back();
        }
      }
      if (!scratch) scratch = std::make_unique<LoadScratch>();
      for (size_t i = next++; i < tasks_.size() && !failed.load(std::memory_order_relaxed); i = next++) {
        // Keep the file read ahead of the packing: the task kReadAhead
        // places on starts reading now.
        if (i + kReadAhead < tasks_.size() && tasks_[i + kReadAhead].source)
          tasks_[i + kReadAhead].source->prefetch(tasks_[i + kReadAhead].offset, tasks_[i + kReadAhead].bytes);
        Status st = tasks_[i].body(*scratch);
        std::lock_guard<std::mutex> lock(mu);
        if (!st.ok()) {
          if (!failed.exchange(true)) first_error = st;
          break;
        }
        const uint64_t now = done += tasks_[i].bytes;
        if (progress) progress(now, total_bytes_);
      }
      std::lock_guard<std::mutex> lock(mu);
      free_scratch.push_back(std::move(scratch));
    }
  });
  tasks_.clear();
  return first_error;
}

}  // namespace dsv4
