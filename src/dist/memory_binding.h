// Where a placed rank's memory lives. A rank pinned to a NUMA node binds
// its weights and KV pages to that node once they are allocated: the
// loader's first touch already put most pages there, binding makes it hold
// for every page (and migrates any that landed elsewhere). Requests go
// through this interface so that tests and the machine simulator can see
// them; HwlocMemoryBinding makes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"

struct hwloc_topology;

namespace dsv4 {

class MemoryBinding {
 public:
  virtual ~MemoryBinding() = default;
  // Keeps [at, at + bytes) on NUMA node `node` (OS index).
  virtual Status bind(const void* at, size_t bytes, int node) = 0;
};

// hwloc_set_area_membind on the pages wholly inside each area (a partial
// page at either end may hold a neighbour's memory and is left alone).
class HwlocMemoryBinding : public MemoryBinding {
 public:
  static StatusOr<std::unique_ptr<HwlocMemoryBinding>> create();
  ~HwlocMemoryBinding() override;
  Status bind(const void* at, size_t bytes, int node) override;

 private:
  HwlocMemoryBinding() = default;
  ::hwloc_topology* topology_ = nullptr;
};

// Records each request and answers which node an address was bound to:
// for tests, and for the simulator, which has no second node to bind to.
class RecordedMemoryBinding : public MemoryBinding {
 public:
  struct Request {
    uintptr_t begin, end;
    int node;
  };
  Status bind(const void* at, size_t bytes, int node) override;
  // The node of the latest request covering `at`, or -1.
  int node_of(const void* at) const;
  std::vector<Request> requests() const;
  int64_t bytes_on(int node) const;

 private:
  mutable std::mutex mu_;
  std::map<uintptr_t, Request> by_begin_;  // disjoint: a new request replaces what it overlaps
};

}  // namespace dsv4
