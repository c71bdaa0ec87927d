#include "dist/topology.h"

namespace dsv4 {

StatusOr<Topology> Topology::make(const TopologyOptions& o, const ModelConfig& c, int world_size) {
  auto bad = [](const std::string& m) { return invalid_argument("topology: " + m); };
  if (o.tp < 1 || o.dp < 1 || o.ep < 0) return bad("--tp and --dp must be at least 1 and --ep not negative");
  Topology t;
  t.tp = o.tp;
  t.dp = o.dp;
  t.world = o.tp * o.dp;
  if (world_size > 0 && world_size != t.world)
    return bad("--tp " + std::to_string(o.tp) + " x --dp " + std::to_string(o.dp) + " = " + std::to_string(t.world) +
               " ranks, but " + std::to_string(world_size) + " processes were started");
  t.ep = o.ep ? o.ep : t.world;
  if (t.world % t.ep != 0) return bad("--ep " + std::to_string(t.ep) + " must divide the " + std::to_string(t.world) + " ranks");
  if (c.n_routed_experts % t.ep != 0)
    return bad("--ep " + std::to_string(t.ep) + " must divide the " + std::to_string(c.n_routed_experts) + " routed experts");
  if (c.has_dspark() && c.dspark_n_routed_experts % t.ep != 0)
    return bad("--ep " + std::to_string(t.ep) + " must divide the DSpark drafter's " +
               std::to_string(c.dspark_n_routed_experts) + " routed experts");
  struct Dim {
    const char* what;
    int64_t n;
  };
  for (const Dim& d : {Dim{"attention heads", c.n_heads}, Dim{"indexer heads", c.index_n_heads},
                       Dim{"hidden size", c.dim}, Dim{"expert width", c.moe_inter_dim}, Dim{"vocabulary", c.vocab_size},
                       Dim{"query rank (q_lora_rank)", c.q_lora_rank}, Dim{"head size", c.head_dim},
                       Dim{"indexer head size", c.index_head_dim}})
    if (d.n % t.tp != 0)
      return bad("--tp " + std::to_string(t.tp) + " must divide the " + std::to_string(d.n) + " " + d.what);
  if (c.o_groups % t.tp != 0 && t.tp % c.o_groups != 0)
    return bad("--tp " + std::to_string(t.tp) + " must divide or be a multiple of the " + std::to_string(c.o_groups) +
               " output groups (o_groups)");
  return t;
}

RankGroups RankGroups::split(Communicator& world, const Topology& t) {
  RankGroups g;
  g.rank = world.rank();
  g.tp = world.split(t.dp_rank(g.rank), t.tp_rank(g.rank));
  g.ep = world.split(g.rank / t.ep, t.ep_rank(g.rank));
  g.peers = world.split(t.tp_rank(g.rank), t.dp_rank(g.rank));
  return g;
}

std::string Topology::describe() const {
  return std::to_string(world) + (world == 1 ? " rank" : " ranks") + ": TP" + std::to_string(tp) + " x DP" +
         std::to_string(dp) + ", EP" + std::to_string(ep);
}

}  // namespace dsv4
