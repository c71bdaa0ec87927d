#include "dist/numa_placement.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

#include "base/logging.h"

namespace dsv4 {
namespace {

// "0-63" for consecutive cores, else "0,2,4".
std::string cpu_list(const std::vector<int>& cpus) {
  if (cpus.empty()) return "none";
  bool runs = true;
  for (size_t i = 1; i < cpus.size(); ++i) runs &= cpus[i] == cpus[i - 1] + 1;
  if (runs) return std::to_string(cpus.front()) + (cpus.size() > 1 ? "-" + std::to_string(cpus.back()) : "");
  std::string s;
  for (int c : cpus) s += (s.empty() ? "" : ",") + std::to_string(c);
  return s;
}

}  // namespace

bool parse_numa_mode(const std::string& name, NumaMode* out) {
  if (name == "auto") *out = NumaMode::kAuto;
  else if (name == "off") *out = NumaMode::kOff;
  else return false;
  return true;
}

StatusOr<NumaPlacement> place_ranks(const MachineTopology& m, NumaMode mode, const TopologyOptions& asked) {
  if (asked.tp < 1 || asked.dp < 1)
    return invalid_argument("--tp and --dp must be at least 1, got --tp " + std::to_string(asked.tp) + " --dp " +
                            std::to_string(asked.dp));
  NumaPlacement p;
  p.layout = asked;
  const int nodes = static_cast<int>(m.nodes.size());
  if (mode == NumaMode::kOff || nodes == 1) {
    std::vector<int> all;
    for (const NumaNode& n : m.nodes) all.insert(all.end(), n.cpus.begin(), n.cpus.end());
    p.ranks.assign(asked.tp * asked.dp, RankPlacement{-1, all});
    return p;
  }
  if (asked.tp == 1 && asked.dp == 1) p.layout.tp = nodes;
  const int world = p.layout.tp * p.layout.dp;
  if (world % nodes)
    return invalid_argument("--tp " + std::to_string(p.layout.tp) + " x --dp " + std::to_string(p.layout.dp) + " = " +
                            std::to_string(world) + " ranks do not spread evenly over " + std::to_string(nodes) +
                            " NUMA nodes (--numa off runs them unplaced)");
  const int per_node = world / nodes;
  for (int r = 0; r < world; ++r) {
    const NumaNode& n = m.nodes[r / per_node];
    const int slice = static_cast<int>(n.cpus.size()) / per_node, first = (r % per_node) * slice;
    if (slice == 0)
      return invalid_argument(std::to_string(per_node) + " ranks a NUMA node, more than node " +
                              std::to_string(n.os_index) + "'s " + std::to_string(n.cpus.size()) + " cores");
    p.ranks.push_back({n.os_index, std::vector<int>(n.cpus.begin() + first, n.cpus.begin() + first + slice)});
  }
  return p;
}

std::string NumaPlacement::describe() const {
  std::string s = std::to_string(ranks.size()) + (ranks.size() == 1 ? " rank" : " ranks") + ": TP" +
                  std::to_string(layout.tp) + " x DP" + std::to_string(layout.dp);
  if (!pinned()) return s + ", not pinned (threads on all " + std::to_string(ranks.front().cpus.size()) + " cores)";
  for (size_t r = 0; r < ranks.size(); ++r)
    s += "\n  rank " + std::to_string(r) + ": NUMA node " + std::to_string(ranks[r].node) + ", cores " +
         cpu_list(ranks[r].cpus) + " (" + std::to_string(ranks[r].cpus.size()) + " threads)";
  return s;
}

Status pin_thread_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (cpu < 0 || cpu >= CPU_SETSIZE) return invalid_argument("core " + std::to_string(cpu) + " is out of range");
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
    return internal_error("cannot pin a thread to core " + std::to_string(cpu));
  return Status::Ok();
}

std::unique_ptr<ThreadPool> rank_pool(const RankPlacement& rank) {
  std::vector<int> cpus = rank.cpus;
  return std::make_unique<ThreadPool>(static_cast<int>(cpus.size()), [cpus](int i) {
    if (Status s = pin_thread_to(cpus[i]); !s.ok()) log_warn(s.message());
  });
}

}  // namespace dsv4
