// Which rank does what: world = tp x dp ranks; rank r is TP rank r % tp of
// DP group r / tp; routed experts are spread over ep ranks (ep divides the
// world and the expert count). Canonical DeepSeek-V4-Flash: tp 4, dp 4, ep 16.
#pragma once

#include <string>

#include "base/status.h"
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

}  // namespace dsv4
