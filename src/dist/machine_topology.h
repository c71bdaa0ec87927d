// The machine ranks run on, as hwloc sees it: its NUMA nodes, the physical
// cores of each and their memory. detect() reads this machine; synthetic()
// builds one from an hwloc synthetic description (such as
// "package:2 numa:1 core:64 pu:2"), so placement is decided and tested for
// machines we do not have.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4 {

struct NumaNode {
  int os_index = 0;
  std::vector<int> cpus;  // each core's first hardware thread (OS numbering): one compute thread a core
  int64_t memory_bytes = 0;
};

struct MachineTopology {
  int packages = 1;
  std::vector<NumaNode> nodes;  // by OS index

  int cores() const;
  std::string describe() const;  // "2 NUMA nodes x 64 cores (2 packages)"

  static StatusOr<MachineTopology> detect();
  static StatusOr<MachineTopology> synthetic(const std::string& description);
  // The description synthetic() takes for `packages` packages holding
  // `nodes` NUMA nodes of `cores` cores in all (each count dividing the next).
  static StatusOr<std::string> description_of(int packages, int nodes, int cores);
};

}  // namespace dsv4
