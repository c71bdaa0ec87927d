#include "dist/memory_binding.h"

#include <hwloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dsv4 {

StatusOr<std::unique_ptr<HwlocMemoryBinding>> HwlocMemoryBinding::create() {
  std::unique_ptr<HwlocMemoryBinding> b(new HwlocMemoryBinding);
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) < 0) return internal_error("hwloc_topology_init failed");
  b->topology_ = t;
  if (hwloc_topology_load(t) < 0) return internal_error("hwloc could not read the machine's topology");
  return b;
}

HwlocMemoryBinding::~HwlocMemoryBinding() {
  if (topology_) hwloc_topology_destroy(topology_);
}

Status HwlocMemoryBinding::bind(const void* at, size_t bytes, int node) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(at) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(at) + bytes) / page * page;
  if (end <= begin) return Status::Ok();
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  hwloc_bitmap_only(set, static_cast<unsigned>(node));
  const int rc = hwloc_set_area_membind(topology_, reinterpret_cast<const void*>(begin), end - begin, set,
                                        HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_MIGRATE);
  const int err = errno;
  hwloc_bitmap_free(set);
  if (rc < 0)
    return internal_error("could not bind " + std::to_string(end - begin) + " bytes to NUMA node " +
                          std::to_string(node) + ": " + std::strerror(err));
  return Status::Ok();
}

Status RecordedMemoryBinding::bind(const void* at, size_t bytes, int node) {
  if (bytes == 0) return Status::Ok();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(at), end = begin + bytes;
  std::lock_guard<std::mutex> lock(mu_);
  // Cut what the new request overlaps down to the parts outside it.
  auto it = by_begin_.upper_bound(begin);
  if (it != by_begin_.begin()) --it;
  std::vector<Request> keep;
  while (it != by_begin_.end() && it->second.begin < end) {
    const Request r = it->second;
    if (r.end <= begin) {
      ++it;
      continue;
    }
    it = by_begin_.erase(it);
    if (r.begin < begin) keep.push_back({r.begin, begin, r.node});
    if (r.end > end) keep.push_back({end, r.end, r.node});
  }
  for (const Request& r : keep) by_begin_[r.begin] = r;
  by_begin_[begin] = {begin, end, node};
  return Status::Ok();
}

int RecordedMemoryBinding::node_of(const void* at) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(at);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_begin_.upper_bound(a);
  if (it == by_begin_.begin()) return -1;
  --it;
  return a < it->second.end ? it->second.node : -1;
}

std::vector<RecordedMemoryBinding::Request> RecordedMemoryBinding::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Request> out;
  for (const auto& [b, r] : by_begin_) out.push_back(r);
  return out;
}

int64_t RecordedMemoryBinding::bytes_on(int node) const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [b, r] : by_begin_)
    if (r.node == node) n += static_cast<int64_t>(r.end - r.begin);
  return n;
}

}  // namespace dsv4
