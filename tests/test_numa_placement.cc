// Ranks placed on NUMA nodes, for machines described as hwloc synthetic
// topologies (two sockets of 64 cores with two hardware threads each, four
// nodes of 24 cores, one node of 192) and for this machine: the layout
// chosen, each rank's node and cores, refusals naming the problem, and
// nothing placed on a one-node machine.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "dist/machine_topology.h"
#include "dist/numa_placement.h"
#include "test_util.h"

namespace dsv4 {
namespace {

MachineTopology machine(const std::string& description) {
  auto m = MachineTopology::synthetic(description);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *m : MachineTopology{};
}

TEST(NumaPlacement, TwoSocketsGetATensorParallelRankEachOnTheirOwnCores) {
  const MachineTopology m = machine("package:2 numa:1 core:64 pu:2");
  ASSERT_EQ(m.nodes.size(), 2u);
  EXPECT_EQ(m.cores(), 128);
  EXPECT_EQ(m.describe(), "2 NUMA nodes x 64 cores (2 packages)");
  // One thread a core: each core's first hardware thread.
  EXPECT_EQ(m.nodes[0].cpus.front(), 0);
  EXPECT_EQ(m.nodes[0].cpus[1], 2);
  EXPECT_EQ(m.nodes[1].cpus.front(), 128);
  auto p = place_ranks(m, NumaMode::kAuto, {});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->layout.tp, 2);
  EXPECT_EQ(p->layout.dp, 1);
  ASSERT_EQ(p->ranks.size(), 2u);
  EXPECT_TRUE(p->pinned());
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(p->ranks[r].node, r);
    EXPECT_EQ(p->ranks[r].cpus, m.nodes[r].cpus);
  }
  EXPECT_NE(p->describe().find("rank 1: NUMA node 1, cores 128,130,"), std::string::npos) << p->describe();
}

TEST(NumaPlacement, SeveralRanksANodeShareItsCoresAndKeepTheirTensorGroupOnIt) {
  const MachineTopology m = machine("numa:4 core:24 pu:1");
  ASSERT_EQ(m.nodes.size(), 4u);
  auto tp = place_ranks(m, NumaMode::kAuto, {});
  ASSERT_TRUE(tp.ok()) << tp.status().message();
  EXPECT_EQ(tp->layout.tp, 4);
  EXPECT_EQ(tp->ranks.size(), 4u);
  EXPECT_EQ(tp->ranks[3].cpus.size(), 24u);
  // TP2 x DP4: two ranks a node, 12 cores each, a tensor-parallel pair on one node.
  auto p = place_ranks(m, NumaMode::kAuto, {2, 4, 0});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->layout.tp, 2);
  EXPECT_EQ(p->layout.dp, 4);
  ASSERT_EQ(p->ranks.size(), 8u);
  std::set<int> used;
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(p->ranks[r].node, r / 2);
    EXPECT_EQ(p->ranks[r].cpus.size(), 12u);
    for (int c : p->ranks[r].cpus) EXPECT_TRUE(used.insert(c).second) << "core " << c << " given twice";
  }
  EXPECT_EQ(p->ranks[0].cpus.front(), 0);
  EXPECT_EQ(p->ranks[1].cpus.front(), 12);
  EXPECT_NE(p->describe().find("rank 1: NUMA node 0, cores 12-23 (12 threads)"), std::string::npos) << p->describe();
}

TEST(NumaPlacement, OneNodeOrNumaOffPlacesNothing) {
  const MachineTopology one = machine("core:192 pu:1");
  ASSERT_EQ(one.nodes.size(), 1u);
  auto p = place_ranks(one, NumaMode::kAuto, {2, 1, 0});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->layout.tp, 2);
  EXPECT_FALSE(p->pinned());
  EXPECT_EQ(p->ranks[1].cpus.size(), 192u);
  auto off = place_ranks(machine("package:2 numa:1 core:64 pu:1"), NumaMode::kOff, {});
  ASSERT_TRUE(off.ok()) << off.status().message();
  EXPECT_EQ(off->layout.tp, 1);
  EXPECT_EQ(off->ranks.size(), 1u);
  EXPECT_FALSE(off->pinned());
  EXPECT_NE(off->describe().find("not pinned"), std::string::npos) << off->describe();
}

TEST(NumaPlacement, UnevenLayoutsAndBadMachinesAreRefusedByName) {
  auto three = place_ranks(machine("package:2 numa:1 core:8 pu:1"), NumaMode::kAuto, {3, 1, 0});
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.status().message().find("3 ranks do not spread evenly over 2 NUMA nodes"), std::string::npos)
      << three.status().message();
  auto crowded = place_ranks(machine("numa:2 core:2 pu:1"), NumaMode::kAuto, {2, 4, 0});
  ASSERT_FALSE(crowded.ok());
  EXPECT_NE(crowded.status().message().find("4 ranks a NUMA node, more than node 0's 2 cores"), std::string::npos)
      << crowded.status().message();
  EXPECT_FALSE(MachineTopology::synthetic("sockets:two").ok());
  auto d = MachineTopology::description_of(2, 2, 128);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, "package:2 numa:1 core:64 pu:1");
  auto bad = MachineTopology::description_of(2, 3, 128);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("each count must divide the next"), std::string::npos);
}

// This machine as hwloc reads it: its cores are among the hardware threads
// the process sees; on one node (as here) nothing is placed.
TEST(NumaPlacement, ThisMachine) {
  auto m = MachineTopology::detect();
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_GE(m->nodes.size(), 1u);
  EXPECT_GE(m->cores(), 1);
  EXPECT_LE(m->cores(), static_cast<int>(std::thread::hardware_concurrency()));
  auto p = place_ranks(*m, NumaMode::kAuto, {});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->pinned(), m->nodes.size() > 1);
  EXPECT_EQ(p->layout.tp, static_cast<int>(m->nodes.size()));
}

// dsv4 plan places the ranks of a machine it is given and plans per rank of
// that layout.
TEST(NumaPlacement, PlanPlacesTheRanksOfAGivenMachine) {
  const auto two = testing::run_dsv4("plan --config flash --memory 768G --sockets 2 --cores 128");
  EXPECT_EQ(two.code, 0) << two.output;
  EXPECT_NE(two.output.find("machine: 2 NUMA nodes x 64 cores (2 packages)"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("placement: 2 ranks: TP2 x DP1"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("rank 1: NUMA node 1, cores 64-127 (64 threads)"), std::string::npos) << two.output;
  const auto one = testing::run_dsv4("plan --config flash --memory 768G");
  EXPECT_EQ(one.output.find("placement:"), std::string::npos) << one.output;
  const auto bad = testing::run_dsv4("plan --config flash --sockets 2 --numa-nodes 3 --cores 128");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("each count must divide the next"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace dsv4
