// Ranks placed on NUMA nodes, for machines described as hwloc synthetic
// topologies (two sockets of 64 cores with two hardware threads each, four
// nodes of 24 cores, one node of 192) and for this machine: the layout
// chosen, each rank's node and cores, refusals naming the problem, and
// nothing placed on a one-node machine.
#include <gtest/gtest.h>

#include <sched.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <thread>

#include "checkpoint/config_json.h"
#include "dist/machine_topology.h"
#include "dist/numa_placement.h"
#include "runtime/engine.h"
#include "runtime/local_executor.h"
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
  for (const MachineTopology& m : {machine("core:4 pu:1"), machine("numa:2 core:2 pu:1")}) {
    auto zero = place_ranks(m, NumaMode::kAuto, {0, 1, 0});
    ASSERT_FALSE(zero.ok());
    EXPECT_NE(zero.status().message().find("--tp and --dp must be at least 1, got --tp 0"), std::string::npos)
        << zero.status().message();
  }
  const auto run = testing::run_dsv4("run --prompt hi --tp 0");
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_NE(run.output.find("--tp and --dp must be at least 1"), std::string::npos) << run.output;
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

std::vector<int> affinity_of_this_thread() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// A rank's pool on this machine's cores: a thread a core, each pinned to
// its own; parallel_for in the pool's scope runs on them, outside it on the
// process's pool.
TEST(NumaPlacement, ARankPoolRunsEachThreadOnItsOwnCore) {
  auto m = MachineTopology::detect();
  ASSERT_TRUE(m.ok()) << m.status().message();
  const RankPlacement rank{m->nodes[0].os_index, m->nodes[0].cpus};
  auto pool = rank_pool(rank);
  ASSERT_EQ(pool->num_threads(), static_cast<int>(rank.cpus.size()));
  std::mutex mu;
  std::set<std::vector<int>> masks;
  std::thread caller([&] {
    ASSERT_TRUE(pin_thread_to(rank.cpus.front()).ok());
    ThreadPool::Scope scope(pool.get());
    EXPECT_EQ(&ThreadPool::current(), pool.get());
    for (int round = 0; round < 20; ++round)
      parallel_for(64, 1, [&](int64_t, int64_t) {
        const std::vector<int> mask = affinity_of_this_thread();
        volatile double x = 0;
        for (int i = 0; i < 20000; ++i) x = x + i;  // long enough for every worker to take some
        std::lock_guard<std::mutex> lock(mu);
        masks.insert(mask);
      });
  });
  caller.join();
  EXPECT_EQ(&ThreadPool::current(), &ThreadPool::global());
  for (const auto& mask : masks) {
    ASSERT_EQ(mask.size(), 1u) << "a pool thread not pinned to one core";
    EXPECT_NE(std::find(rank.cpus.begin(), rank.cpus.end(), mask[0]), rank.cpus.end());
  }
  EXPECT_EQ(masks.size(), rank.cpus.size()) << "every pool thread took chunks, each on its own core";
  EXPECT_FALSE(pin_thread_to(-1).ok());
}

// The pool counts its calls and the jobs it hands its workers (the bench's
// pool jobs per decode token): a call too small to split, or nested in a
// job, runs inline and is no job.
TEST(NumaPlacement, APoolCountsItsJobs) {
  ThreadPool pool(2);
  ThreadPool::Scope scope(&pool);
  parallel_for(1, 1, [](int64_t, int64_t) {});    // one chunk: inline
  parallel_for(100, 1, [](int64_t, int64_t) {});  // a job
  parallel_for(100, 1, [](int64_t b, int64_t) {
    if (b == 0) parallel_for(100, 1, [](int64_t, int64_t) {});  // nested: inline
  });
  EXPECT_EQ(pool.calls(), 4);
  EXPECT_EQ(pool.jobs(), 2);
}

// Ranks as threads, each pinned with its own pool (two ranks on this
// machine's two cores stand for two nodes' ranks), load their shares and
// greedy-decode exactly what unplaced ranks do.
TEST(NumaPlacement, PlacedRanksGenerateWhatUnplacedRanksDo) {
  auto m = MachineTopology::detect();
  ASSERT_TRUE(m.ok()) << m.status().message();
  const std::vector<int>& cpus = m->nodes[0].cpus;
  const std::string dir = testing::golden_dir() + "/small-real";
  auto config = load_any_model_config(dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status().message();
  auto generate = [&](const ParallelOptions& p) {
    EngineOptions options;
    auto cache = Engine::cache_options(*config, options);
    EXPECT_TRUE(cache.ok()) << cache.status().message();
    auto exec = LocalExecutor::create(dir, {}, p, *cache);
    EXPECT_TRUE(exec.ok()) << exec.status().message();
    auto engine = Engine::create(std::move(*exec), options.scheduler);
    EXPECT_TRUE(engine.ok()) << engine.status().message();
    return testing::greedy_after_fixed_prompt(**engine);
  };
  ParallelOptions unplaced;
  unplaced.topology.tp = 2;
  const auto want = generate(unplaced);
  ASSERT_EQ(want.size(), 8u);
  ParallelOptions placed = unplaced;
  placed.placement = {{m->nodes[0].os_index, {cpus.front()}}, {m->nodes[0].os_index, {cpus.back()}}};
  EXPECT_EQ(generate(placed), want);
  placed.placement.pop_back();
  EngineOptions options;
  auto cache = Engine::cache_options(*config, options);
  ASSERT_TRUE(cache.ok());
  auto bad = LocalExecutor::create(dir, {}, placed, *cache);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("a placement of 1 ranks for 2"), std::string::npos) << bad.status().message();
}

// dsv4 plan places the ranks of a machine it is given and plans per rank of
// that layout.
TEST(NumaPlacement, PlanPlacesTheRanksOfAGivenMachine) {
  const auto two = testing::run_dsv4("plan --config flash --memory 768G --sockets 2 --cores 128");
  EXPECT_EQ(two.code, 0) << two.output;
  EXPECT_NE(two.output.find("machine: 2 NUMA nodes x 64 cores (2 packages)"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("placement: 2 ranks: TP2 x DP1"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("rank 1: NUMA node 1, cores 64-127 (64 threads)"), std::string::npos) << two.output;
  // Each node's bandwidth: the roofline reads from both.
  const auto fed = testing::run_dsv4("plan --config flash --memory 768G --sockets 2 --cores 128 --node-bandwidth 400G");
  EXPECT_EQ(fed.code, 0) << fed.output;
  EXPECT_NE(fed.output.find("at 800 GB/s"), std::string::npos) << fed.output;
  const auto alone = testing::run_dsv4("plan --config flash --node-bandwidth 400G");
  EXPECT_EQ(alone.code, 2) << alone.output;
  EXPECT_NE(alone.output.find("--node-bandwidth goes with a machine"), std::string::npos) << alone.output;
  const auto one = testing::run_dsv4("plan --config flash --memory 768G");
  EXPECT_EQ(one.output.find("placement:"), std::string::npos) << one.output;
  const auto bad = testing::run_dsv4("plan --config flash --sockets 2 --numa-nodes 3 --cores 128");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("each count must divide the next"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace dsv4
