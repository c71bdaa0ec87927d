// The reads of a load, run in parallel: each task reads a bounded byte range
// of one tensor into a scratch buffer and writes its final form (packed
// panels, rows of a table), so memory beyond the weights themselves stays at
// a few scratch buffers per thread whatever the checkpoint's size. Tasks run
// in file order (sequential reads for a cold cache) on the thread pool.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/weights.h"

namespace dsv4 {

struct TensorInfo;
class SafetensorsFile;

// A thread's scratch while it runs a task; buffers grow to the largest
// task's needs and are reused.
struct LoadScratch {
  std::vector<uint8_t> bytes, more_bytes;
  std::vector<float> floats;
};

class LoadTasks {
 public:
  using Body = std::function<Status(LoadScratch&)>;

  // A task reading `bytes` of tensor t starting at `begin` (for ordering
  // and progress; the body does the reading).
  void add(const TensorInfo& t, uint64_t begin, uint64_t bytes, Body body);
  uint64_t total_bytes() const { return total_bytes_; }
  size_t size() const { return tasks_.size(); }

  // Runs every task; the first error stops the rest. progress is called
  // from the loading threads, one call at a time.
  Status run(const LoadProgress& progress);

 private:
  struct Task {
    const SafetensorsFile* source;
    const std::string* file;
    uint64_t offset, bytes;
    Body body;
  };
  std::vector<Task> tasks_;
  uint64_t total_bytes_ = 0;
};

// The byte size of a task: rows of a tensor are cut into pieces of about
// this much, whole panels at a time.
inline constexpr uint64_t kLoadTaskBytes = uint64_t{4} << 20;

}  // namespace dsv4
