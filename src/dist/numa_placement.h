// Where the ranks go on a machine with several NUMA nodes (issue: as
// SGLang's CPU backend does): one rank per node by default, tensor parallel
// across the nodes, each rank's compute threads on its node's cores, one a
// core, so its weights, KV pages and scratch can live on its node. A
// tensor-parallel group is consecutive ranks (Topology::tp_rank), so with
// several ranks a node its collectives stay on the node.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
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

// Pins the calling thread to one core (OS numbering).
Status pin_thread_to(int cpu);
// A rank's own pool: a thread on each of its cores, worker i pinned to
// cpus[i] (the rank's thread, thread 0, pins itself to cpus[0]). What its
// threads first touch (weights as they load, scratch, KV pages) lands on
// the rank's node.
std::unique_ptr<ThreadPool> rank_pool(const RankPlacement& rank);

}  // namespace dsv4
