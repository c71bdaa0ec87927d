#include "dist/machine_topology.h"

#include <hwloc.h>

#include <memory>

namespace dsv4 {
namespace {

// What hwloc found, NUMA nodes and the cores inside each.
StatusOr<MachineTopology> read(hwloc_topology_t t) {
  MachineTopology m;
  m.packages = std::max(1, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE));
  const int nodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nodes; ++i) {
    hwloc_obj_t n = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, i);
    NumaNode node;
    node.os_index = static_cast<int>(n->os_index);
    node.memory_bytes = static_cast<int64_t>(n->attr->numanode.local_memory);
    const int cores = hwloc_get_nbobjs_inside_cpuset_by_type(t, n->cpuset, HWLOC_OBJ_CORE);
    for (int c = 0; c < cores; ++c) {
      hwloc_obj_t core = hwloc_get_obj_inside_cpuset_by_type(t, n->cpuset, HWLOC_OBJ_CORE, c);
      const int first = hwloc_bitmap_first(core->cpuset);
      if (first >= 0) node.cpus.push_back(first);
    }
    if (!node.cpus.empty()) m.nodes.push_back(std::move(node));  // a memory-only node runs no rank
  }
  if (m.nodes.empty()) return internal_error("hwloc found no NUMA node with cores");
  return m;
}

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};

StatusOr<MachineTopology> load(const std::string* synthetic) {
  hwloc_topology_t raw;
  if (hwloc_topology_init(&raw) < 0) return internal_error("hwloc_topology_init failed");
  std::unique_ptr<hwloc_topology, TopologyDeleter> t(raw);
  if (synthetic && hwloc_topology_set_synthetic(raw, synthetic->c_str()) < 0)
    return invalid_argument("'" + *synthetic + "' is not an hwloc synthetic topology");
  if (hwloc_topology_load(raw) < 0) return internal_error("hwloc could not read the machine's topology");
  return read(raw);
}

}  // namespace

int MachineTopology::cores() const {
  int n = 0;
  for (const NumaNode& node : nodes) n += static_cast<int>(node.cpus.size());
  return n;
}

std::string MachineTopology::describe() const {
  const int per = static_cast<int>(nodes.front().cpus.size());
  bool even = true;
  for (const NumaNode& n : nodes) even &= static_cast<int>(n.cpus.size()) == per;
  std::string s = std::to_string(nodes.size()) + (nodes.size() == 1 ? " NUMA node" : " NUMA nodes");
  s += even ? " x " + std::to_string(per) + " cores" : ", " + std::to_string(cores()) + " cores";
  return s + " (" + std::to_string(packages) + (packages == 1 ? " package)" : " packages)");
}

StatusOr<MachineTopology> MachineTopology::detect() { return load(nullptr); }

StatusOr<MachineTopology> MachineTopology::synthetic(const std::string& description) { return load(&description); }

StatusOr<std::string> MachineTopology::description_of(int packages, int nodes, int cores) {
  if (packages < 1 || nodes < packages || nodes % packages || cores < nodes || cores % nodes)
    return invalid_argument(std::to_string(packages) + " sockets, " + std::to_string(nodes) + " NUMA nodes and " +
                            std::to_string(cores) +
                            " cores: each count must divide the next (nodes per socket, cores per node)");
  return "package:" + std::to_string(packages) + " numa:" + std::to_string(nodes / packages) +
         " core:" + std::to_string(cores / nodes) + " pu:1";
}

}  // namespace dsv4
