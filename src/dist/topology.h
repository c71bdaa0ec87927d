// Which rank does what: world = tp x dp ranks; rank r is TP rank r % tp of
// DP group r / tp; routed experts are spread over ep ranks (ep divides the
// world and the expert count). Canonical DeepSeek-V4-Flash: tp 4, dp 4, ep 16.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "dist/communicator.h"
#include "model/config.h"

namespace dsv4 {

struct TopologyOptions {
  int tp = 1;
  int dp = 1;
  int ep = 0;  // 0: the whole world
};

struct Topology {
  int world = 1, tp = 1, dp = 1, ep = 1;

  // Checks the shape against the model: every sharded dimension must
  // divide by tp, the experts by ep. world_size: the processes MPI started
  // (0: ranks are threads, world = tp x dp).
  static StatusOr<Topology> make(const TopologyOptions& options, const ModelConfig& config, int world_size = 0);

  int tp_rank(int rank) const { return rank % tp; }
  int dp_rank(int rank) const { return rank / tp; }
  int ep_rank(int rank) const { return rank % ep; }
  int experts_per_rank(const ModelConfig& c) const { return c.n_routed_experts / ep; }
  std::string describe() const;  // "16 ranks: TP4 x DP4, EP16"
};

// A rank's groups, split from the world (a collective over every rank).
struct RankGroups {
  int rank = 0;
  std::unique_ptr<Communicator> tp;     // my data-parallel group's ranks, in TP order
  std::unique_ptr<Communicator> ep;     // the ranks holding the routed experts between them
  std::unique_ptr<Communicator> peers;  // the same TP rank of every data-parallel group, in DP order

  static RankGroups split(Communicator& world, const Topology& topology);
};

}  // namespace dsv4
