// Where the ranks go on a machine with several NUMA nodes (issue: as
// SGLang's CPU backend does): one rank per node by default, tensor parallel
// across the nodes, each rank's compute threads on its node's cores, one a
// core, so its weights, KV pages and scratch can live on its node. A
// tensor-parallel group is consecutive ranks (Topology::tp_rank), so with
// several ranks a node its collectives stay on the node.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "dist/machine_topology.h"
#include "dist/topology.h"

namespace dsv4 {

enum class NumaMode { kAuto, kOff };
bool parse_numa_mode(const std::string& name, NumaMode* out);  // "auto", "off"

struct RankPlacement {
  int node = -1;          // NUMA node (OS index); -1: not pinned
  std::vector<int> cpus;  // the cores its threads run on (OS numbering), one thread each
};

struct NumaPlacement {
  TopologyOptions layout;            // the ranks' tp x dp (ep as asked)
  std::vector<RankPlacement> ranks;  // by rank
  bool pinned() const { return !ranks.empty() && ranks.front().node >= 0; }
  std::string describe() const;      // the layout and each node's ranks and cores
};

// The ranks on machine m. kAuto on several NUMA nodes: `asked` (tp x dp
// ranks, 1 x 1 meaning tensor parallel over every node) spread evenly over
// the nodes, consecutive ranks sharing a node and its cores in equal,
// disjoint slices. kOff, or one node: `asked` as it is, unpinned, every rank
// sharing all cores.
StatusOr<NumaPlacement> place_ranks(const MachineTopology& m, NumaMode mode, const TopologyOptions& asked);

}  // namespace dsv4
