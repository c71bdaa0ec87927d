// Work for many threads and the machine simulator (bench --simulate):
// products split into tiles that keep 64+ workers busy and give the same
// numbers on any pool (exact numerics bit for bit, fast numerics the same
// bits at any batch size and thread count); a simulated pool runs the tiles
// a big machine's workers would get; the simulator schedules and charges
// them as documented; and ranks placed on a simulated two-node machine bind
// every weight and KV page they read to their own node.
#include <atomic>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "base/phase_timer.h"
#include "base/thread_pool.h"
#include "checkpoint/config_json.h"
#include "dist/local_communicator.h"
#include "dist/machine_topology.h"
#include "dist/memory_binding.h"
#include "dist/numa_placement.h"
#include "kernels/dispatch.h"
#include "ops/linear.h"
#include "runtime/engine.h"
#include "runtime/local_executor.h"
#include "golden_v41_case.h"
#include "test_util.h"
#include "tools/golden_verify.h"
#include "tools/machine_simulation.h"

namespace dsv4 {
namespace {

using kernels::Numerics;

// A job observer that only counts what it is told.
struct CountingObserver : JobObserver {
  std::vector<int64_t> job_tiles;
  int64_t tiles_begun = 0, bytes = 0;
  void read(const void*, int64_t n) override { bytes += n; }
  void job_begins(int64_t tiles) override { job_tiles.push_back(tiles); }
  void tile_begins(int64_t) override { ++tiles_begun; }
  void tile_ends(double) override {}
  void job_ends() override {}
  void phase_changes(Phase, Phase) override {}
};

TEST(SimulatedPool, SplitsWorkAsItsLogicalWorkersWouldAndRunsItAll) {
  CountingObserver seen;
  auto pool = ThreadPool::simulated(64, &seen);
  ThreadPool::Scope scope(pool.get());
  EXPECT_EQ(ThreadPool::current().num_threads(), 64);
  std::vector<int> hits(1000, 0);
  parallel_for(1000, 1, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) ++hits[i];
    parallel_for(10, 1, [](int64_t, int64_t) {});  // nested: inside its tile
  });
  parallel_for(100, 100, [](int64_t, int64_t) {});  // one tile: inline
  parallel_for(40, 1, [](int64_t, int64_t) {});
  for (int h : hits) EXPECT_EQ(h, 1);
  // 4 tiles a worker (1000 items: 3 or 4 a tile), as a real pool of 64
  // threads would cut them.
  EXPECT_EQ(seen.job_tiles, (std::vector<int64_t>{256, 40}));
  EXPECT_EQ(seen.tiles_begun, 296);
  EXPECT_EQ(pool->jobs(), 2);
}

// A simulated job's first tile runs on the calling (rank's) thread, the
// rest in order on one other thread, as the pool's other workers would on
// their cores (the rank's thread keeps its own caches); the observer
// charges every tile's bytes to the phase its job runs in.
TEST(SimulatedPool, TheRankThreadRunsTheFirstTileAndOneOtherThreadTheRest) {
  RecordedMemoryBinding memory;
  std::vector<char> weights(4096);
  ASSERT_TRUE(memory.bind(weights.data(), weights.size(), 0).ok());
  SimulatedMachine m;
  m.nodes = 1;
  m.cores = 8;
  m.node_bandwidth = 8000;
  SimulatedRank rank(m, 0, 8, &memory);
  auto pool = ThreadPool::simulated(8, &rank);
  ThreadPool::Scope scope(pool.get());
  std::vector<std::thread::id> ran(32);
  std::vector<int> order;
  {
    PhaseTimer::Scope phase(Phase::kExperts);
    parallel_for(32, 1, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        ran[i] = std::this_thread::get_id();
        order.push_back(static_cast<int>(i));
      }
      meter_read(weights.data(), 100);
    });
  }
  std::vector<int> in_order(32);
  std::iota(in_order.begin(), in_order.end(), 0);
  EXPECT_EQ(order, in_order);
  EXPECT_EQ(ran[0], std::this_thread::get_id());  // 32 items, 8 workers: tiles of one
  EXPECT_NE(ran[1], std::this_thread::get_id());
  for (int i = 2; i < 32; ++i) EXPECT_EQ(ran[i], ran[1]) << i;
  const PhaseLoad& experts = rank.loads()[static_cast<int>(Phase::kExperts)];
  EXPECT_EQ(experts.jobs, 1);
  EXPECT_EQ(experts.tiles, 32);
  EXPECT_DOUBLE_EQ(experts.local, 3200);
  EXPECT_DOUBLE_EQ(total_of(rank.loads()).local, 3200);  // none in another phase
}

// Each tile goes to the worker that frees up first; a tile costs its CPU
// time or its bytes at its share of its node's bandwidth, whichever is
// more; bytes are local, remote or unplaced by the node they were bound to.
TEST(SimulatedPool, TheSimulatorSchedulesAndChargesTilesAsDocumented) {
  RecordedMemoryBinding memory;
  std::vector<char> near(4096), far(4096), loose(64);
  ASSERT_TRUE(memory.bind(near.data(), near.size(), 0).ok());
  ASSERT_TRUE(memory.bind(far.data(), far.size(), 1).ok());
  SimulatedMachine m;
  m.nodes = 2;
  m.cores = 4;               // 2 workers a node
  m.node_bandwidth = 2000;   // 1000 bytes/s a core
  SimulatedRank rank(m, 0, 2, &memory);
  {
    PhaseTimer::Scope phase(Phase::kAttention);
    rank.job_begins(3);
    const double cpu[3] = {1.0, 1.0, 0.5};
    const int64_t bytes[3] = {0, 3000, 0};  // the second tile is bound by memory: 3 s
    for (int t = 0; t < 3; ++t) {
      rank.tile_begins(t);
      if (bytes[t]) {
        rank.read(near.data(), bytes[t] / 2);
        rank.read(far.data() + 16, bytes[t] / 2);
      }
      rank.tile_ends(cpu[t]);
    }
    rank.job_ends();
    rank.read(loose.data(), 64);  // a call run inline, of memory bound nowhere
  }
  const PhaseLoad& a = rank.loads()[static_cast<int>(Phase::kAttention)];
  EXPECT_EQ(a.jobs, 1);
  EXPECT_EQ(a.tiles, 3);
  EXPECT_DOUBLE_EQ(a.work, 1.0 + 3.0 + 0.5);
  EXPECT_DOUBLE_EQ(a.busiest, 3.0);  // worker 0: 1 + 0.5, worker 1: 3
  EXPECT_DOUBLE_EQ(a.balance(2), 4.5 / 2 / 3.0);
  EXPECT_DOUBLE_EQ(a.local, 1500);
  EXPECT_DOUBLE_EQ(a.remote, 1500);
  EXPECT_DOUBLE_EQ(a.unplaced, 64);
  rank.reset();
  EXPECT_EQ(total_of(rank.loads()).jobs, 0);
  // A job that keeps fewer workers busy gives each more of the node, up to
  // what one core streams alone.
  m.core_peak_bandwidth = 1500;
  EXPECT_DOUBLE_EQ(m.share_of(1), 1500);
  EXPECT_DOUBLE_EQ(m.share_of(2), 1000);
  EXPECT_DOUBLE_EQ(m.share_of(64), 1000);
}

// Balance measures a job against its work spread over every worker. Two
// tiles that stream at the node's bandwidth between them are as fast as
// the job can be on four workers (each of four would get a quarter of the
// node); two tiles of arithmetic leave two of the four workers idle.
TEST(SimulatedPool, BalanceIsAgainstTheJobSpreadOverEveryWorker) {
  RecordedMemoryBinding memory;
  const std::vector<char> weights(4096);
  ASSERT_TRUE(memory.bind(weights.data(), weights.size(), 0).ok());
  SimulatedMachine m;
  m.nodes = 1;
  m.cores = 4;
  m.node_bandwidth = 4000;  // 2000 bytes/s a tile when two stream, 1000 when four do
  SimulatedRank rank(m, 0, 4, &memory);
  auto job = [&](Phase phase, int64_t bytes, double cpu) {
    PhaseTimer::Scope in(phase);
    rank.job_begins(2);
    for (int t = 0; t < 2; ++t) {
      rank.tile_begins(t);
      if (bytes) rank.read(weights.data(), bytes);
      rank.tile_ends(cpu);
    }
    rank.job_ends();
  };
  job(Phase::kAttention, 2000, 0.1);  // 1 s a tile at half the node each
  job(Phase::kExperts, 0, 1.0);
  const PhaseLoad& streaming = rank.loads()[static_cast<int>(Phase::kAttention)];
  EXPECT_DOUBLE_EQ(streaming.busiest, 1.0);
  EXPECT_DOUBLE_EQ(streaming.work, 2 * 2.0);  // each tile at a quarter of the node
  EXPECT_DOUBLE_EQ(streaming.balance(4), 1.0);
  const PhaseLoad& computing = rank.loads()[static_cast<int>(Phase::kExperts)];
  EXPECT_DOUBLE_EQ(computing.busiest, 1.0);
  EXPECT_DOUBLE_EQ(computing.balance(4), 0.5);
}

// A collective's copies are tiles like any: their bytes of the rank's own
// memory at its share of the node, those read from another rank at its
// share of the link. Copies on the rank's thread (too small for a job) are
// priced at one core's bandwidth, with the barriers, for communication.
TEST(SimulatedPool, ACollectivesCopiesArePricedAtTheNodesAndTheLinksShare) {
  SimulatedMachine m;
  m.nodes = 2;
  m.cores = 8;              // 4 workers a node
  m.node_bandwidth = 4000;  // 1000 bytes/s a worker when all four stream
  m.link_bandwidth = 400;   // 100 when all four read across
  m.core_peak_bandwidth = 2000;
  m.job_seconds = 0.5;
  SimulatedRank rank(m, 0, 4, nullptr);
  {
    PhaseTimer::Scope phase(Phase::kCommunication);
    rank.job_begins(4);
    for (int t = 0; t < 4; ++t) {
      rank.tile_begins(t);
      rank.moved(1000, 100);  // 1 s at the node's share, 1 s at the link's
      rank.tile_ends(0.1);
    }
    rank.job_ends();
    rank.moved(2000, 200);  // on the rank's thread: 1 s at one core's 2000, 0.5 s of the link's 400
  }
  const PhaseLoad& comm = rank.loads()[static_cast<int>(Phase::kCommunication)];
  EXPECT_DOUBLE_EQ(comm.busiest, 2.0);
  EXPECT_DOUBLE_EQ(comm.balance(4), 1.0);
  EXPECT_DOUBLE_EQ(comm.local, 0);  // not weights
  EXPECT_DOUBLE_EQ(comm.inline_local, 2000);
  EXPECT_DOUBLE_EQ(comm.inline_peer, 200);
  const CollectiveLoad collectives{3, 0};
  // 2 s of the job, its join and two barriers a collective, 1.5 s inline.
  EXPECT_DOUBLE_EQ(projected_seconds(rank.loads(), Phase::kCommunication, m, collectives), 2.0 + 7 * 0.5 + 1.5);
}

// Ranks as threads copy a large collective on their own pools, in pieces,
// and a small one on their own thread; either way every value is as a
// single copy would leave it (sums in rank order), and what each rank
// moved is told to its meter.
TEST(SimulatedPool, ALargeCollectiveCopiesOnTheRanksPoolAndGivesTheSameValues) {
  constexpr int kRanks = 2;
  SimulatedMachine m;
  m.nodes = 2;
  m.cores = 32;
  auto comms = LocalCommunicator::create(kRanks);
  std::vector<std::unique_ptr<SimulatedRank>> ranks;
  for (int r = 0; r < kRanks; ++r) ranks.push_back(std::make_unique<SimulatedRank>(m, r, 16, nullptr));
  constexpr int64_t kBig = 1 << 16, kSmall = 100;  // floats: 256 KiB, then 400 bytes
  std::vector<std::vector<float>> gathered(kRanks), summed(kRanks), small(kRanks);
  auto value = [](int r, int64_t i) { return std::ldexp(static_cast<float>((i * 7 + r * 3) % 1001), -5) + 0.1f * r; };
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      auto pool = ranks[r]->make_pool();
      ThreadPool::Scope scope(pool.get());
      std::vector<float> mine(kBig);
      for (int64_t i = 0; i < kBig; ++i) mine[i] = value(r, i);
      gathered[r].resize(kRanks * kBig);
      comms[r]->all_gather(mine.data(), sizeof(float) * kBig, gathered[r].data());
      summed[r] = mine;
      comms[r]->all_reduce_sum(summed[r].data(), kBig);
      small[r].assign(mine.begin(), mine.begin() + kSmall);
      comms[r]->all_reduce_sum(small[r].data(), kSmall);
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    for (int from = 0; from < kRanks; ++from) {
      for (int64_t i = 0; i < kBig; ++i) ASSERT_EQ(gathered[r][from * kBig + i], value(from, i)) << r << " " << i;
    }
    for (int64_t i = 0; i < kBig; ++i) {
      const float sum = value(0, i) + value(1, i);
      ASSERT_EQ(summed[r][i], sum) << i;
      if (i < kSmall) {
        ASSERT_EQ(small[r][i], sum) << i;
      }
    }
    const PhaseLoad& comm = ranks[r]->loads()[static_cast<int>(Phase::kCommunication)];
    EXPECT_EQ(comm.jobs, 3);  // the gather's copy, the sum, its copy back
    EXPECT_EQ(comm.tiles, 3 * 16 * ThreadPool::kChunksPerThread);
    // The small sum on the rank's thread: its own values read and the sums
    // written twice (made, then copied back), the other rank's read once.
    EXPECT_DOUBLE_EQ(comm.inline_local, 4.0 * sizeof(float) * kSmall);
    EXPECT_DOUBLE_EQ(comm.inline_peer, 1.0 * sizeof(float) * kSmall);
  }
}

// A one-node machine of two cores.
SimulatedMachine two_cores() {
  SimulatedMachine m;
  m.nodes = 1;
  m.cores = 2;
  return m;
}

// Tells `rank` of a job in `phase` whose tiles took `cpu` seconds each.
void feed_job(SimulatedRank& rank, Phase phase, const std::vector<double>& cpu) {
  PhaseTimer::Scope in(phase);
  rank.job_begins(static_cast<int64_t>(cpu.size()));
  for (size_t t = 0; t < cpu.size(); ++t) {
    rank.tile_begins(static_cast<int64_t>(t));
    rank.tile_ends(cpu[t]);
  }
  rank.job_ends();
}

// Over the steps of a run, a tile's rare long time (this VM's interrupts
// and preemptions) is cut to the usual times of its place, while work that
// comes every few steps (at the same place or in jobs of its own) keeps
// its cost.
TEST(SimulatedPool, ClampedLoadsCutARareLongTileAndKeepPeriodicWork) {
  SimulatedRank rank(two_cores(), 0, 2, nullptr);
  auto job = [&](Phase phase, std::vector<double> cpu) { feed_job(rank, phase, cpu); };
  for (int step = 0; step < 16; ++step) {
    job(Phase::kAttention, {1.0, step == 5 ? 9.0 : 1.0});      // one preempted tile
    job(Phase::kHyperConnections, {step % 4 ? 1.0 : 3.0, 1.0});  // longer every 4th step
    if (step % 4 == 0) job(Phase::kExperts, {2.0, 2.0});        // a job every 4th step
    rank.step_ends();
  }
  const PhaseLoads raw = rank.loads(), clamped = rank.clamped_loads();
  auto busiest = [](const PhaseLoads& l, Phase p) { return l[static_cast<int>(p)].busiest; };
  EXPECT_DOUBLE_EQ(busiest(raw, Phase::kAttention), 15.0 + 9.0);
  EXPECT_DOUBLE_EQ(busiest(clamped, Phase::kAttention), 16.0);
  EXPECT_DOUBLE_EQ(busiest(raw, Phase::kHyperConnections), 12.0 + 4 * 3.0);
  EXPECT_DOUBLE_EQ(busiest(clamped, Phase::kHyperConnections), 12.0 + 4 * 3.0);
  EXPECT_DOUBLE_EQ(busiest(clamped, Phase::kExperts), 4 * 2.0);
  EXPECT_DOUBLE_EQ(clamped[static_cast<int>(Phase::kAttention)].work, 32.0);
  for (int p = 0; p < kNumPhases; ++p) {
    EXPECT_EQ(clamped[p].jobs, raw[p].jobs);
    EXPECT_EQ(clamped[p].tiles, raw[p].tiles);
    EXPECT_LE(clamped[p].serial, raw[p].serial);
  }
  rank.reset();
  EXPECT_EQ(total_of(rank.clamped_loads()).jobs, 0);
}

// A step's trace lists its jobs and the rank thread's serial spans between
// them in the order they ran, each job with its tiles and busiest worker.
TEST(SimulatedPool, AStepsTraceListsItsJobsAndSerialSpansInOrder) {
  SimulatedRank rank(two_cores(), 0, 2, nullptr);
  auto job = [&](Phase phase, std::vector<double> cpu) { feed_job(rank, phase, cpu); };
  auto spin = [](double seconds) {  // the rank thread's own work between jobs
    const double until = thread_cpu_seconds() + seconds;
    while (thread_cpu_seconds() < until) {
    }
  };
  job(Phase::kAttention, {1.0, 1.0});
  spin(2e-3);
  job(Phase::kExperts, {2.0, 1.0, 0.5});
  rank.step_ends();
  job(Phase::kHyperConnections, {3.0});
  rank.step_ends();

  const auto first = rank.trace_of_step(0);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0].phase, Phase::kAttention);
  EXPECT_EQ(first[0].tiles, 2);
  EXPECT_DOUBLE_EQ(first[0].seconds, 1.0);
  EXPECT_EQ(first[1].tiles, 0);  // the spin, a serial span in the phase the next job began in
  EXPECT_EQ(first[1].phase, Phase::kExperts);
  EXPECT_GE(first[1].seconds, 2e-3);
  EXPECT_LT(first[1].seconds, 1.0);
  EXPECT_EQ(first[2].tiles, 3);
  EXPECT_DOUBLE_EQ(first[2].seconds, 2.0);  // worker 0: 2, worker 1: 1 + 0.5
  EXPECT_DOUBLE_EQ(first[2].work, 3.5);
  const auto second = rank.trace_of_step(1);
  ASSERT_EQ(second.size(), 2u);  // the span before its job, then the job
  EXPECT_EQ(second[0].tiles, 0);
  EXPECT_EQ(second[1].phase, Phase::kHyperConnections);
  EXPECT_DOUBLE_EQ(second[1].seconds, 3.0);
  EXPECT_TRUE(rank.trace_of_step(2).empty());
  rank.reset();
  EXPECT_TRUE(rank.trace_of_step(0).empty());
}

TEST(MemoryBinding, ARecordedRequestReplacesWhatItOverlaps) {
  RecordedMemoryBinding b;
  std::vector<char> buf(1000);
  const char* p = buf.data();
  ASSERT_TRUE(b.bind(p, 1000, 0).ok());
  ASSERT_TRUE(b.bind(p + 100, 200, 1).ok());
  EXPECT_EQ(b.node_of(p), 0);
  EXPECT_EQ(b.node_of(p + 99), 0);
  EXPECT_EQ(b.node_of(p + 100), 1);
  EXPECT_EQ(b.node_of(p + 299), 1);
  EXPECT_EQ(b.node_of(p + 300), 0);
  EXPECT_EQ(b.node_of(p + 1000), -1);
  EXPECT_EQ(b.bytes_on(0), 800);
  EXPECT_EQ(b.bytes_on(1), 200);
  EXPECT_EQ(b.requests().size(), 3u);
}

// A layer in the given format with random weights, packed.
Linear random_linear(WeightFormat f, int64_t out, int64_t in, bool round_input, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Linear l;
  l.out = out;
  l.in = in;
  l.format = f;
  l.round_input = round_input;
  if (f == WeightFormat::kDense) {
    l.w.resize(out * in);
    for (float& v : l.w) v = normal(rng);
  } else if (f == WeightFormat::kBf16) {
    l.codes.resize(out * in * 2);
    for (int64_t i = 0; i < out * in; ++i) {
      const uint16_t v = f32_to_bf16(normal(rng));
      std::memcpy(&l.codes[2 * i], &v, 2);
    }
  } else {
    const bool fp8 = f == WeightFormat::kFp8Block;
    const int64_t block = fp8 ? 128 : 32;
    l.codes.resize(out * in);
    for (uint8_t& c : l.codes) {
      c = static_cast<uint8_t>(rng() % (fp8 ? 256 : 16));
      if (fp8 && (c & 0x7F) == 0x7F) c ^= 1;  // no NaN codes
    }
    l.scales.resize(out * in / block);
    for (uint8_t& s : l.scales) s = static_cast<uint8_t>(120 + rng() % 8);
  }
  l.pack();
  return l;
}

std::vector<float> forward(const Linear& l, Numerics n, const std::vector<float>& x, int64_t m) {
  std::vector<float> y(m * l.out);
  linear_forward(kernels::kernels_for(n), l, x.data(), m, y.data());
  return y;
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, sizeof(float) * n) == 0; }

// Products split into single panels for one row and into row blocks for
// many (the shapes of the mHC mixing weights, wkv, a partial last panel,
// every weight format): both numerics give the same bits on a simulated
// 64-worker pool as on this machine's and for a row alone or among 64, and
// fast stays within float rounding of exact.
// A decode step's token on a many-core node is attended in blocks of key
// slots and output dimensions (two jobs) instead of a task per head group:
// on one worker and on 64 the golden's every tensor has the same bits,
// bit-exact with the reference in exact numerics.
TEST(AttentionTiles, ATokenCutAlongItsSlotsAndDimensionsKeepsItsBits) {
  CountingObserver seen;
  auto one = ThreadPool::simulated(1, &seen), wide = ThreadPool::simulated(64, &seen);
  for (Numerics n : {Numerics::kExact, Numerics::kFast}) {
    const DeepseekV4& model = testing::golden_model("small-real", n);
    VerifyOptions opt;
    opt.golden_path = testing::golden_dir() + "/small-real/golden.safetensors";
    std::vector<TensorCheck> checks[2];
    for (int run = 0; run < 2; ++run) {
      ThreadPool::Scope scope(run ? wide.get() : one.get());
      auto report = verify_golden(model, opt);
      ASSERT_TRUE(report.ok()) << report.status().message();
      checks[run] = report->tensors;
    }
    ASSERT_EQ(checks[0].size(), checks[1].size());
    ASSERT_FALSE(checks[0].empty());
    for (size_t i = 0; i < checks[0].size(); ++i) {
      EXPECT_EQ(checks[0][i].rel_l2, checks[1][i].rel_l2) << kernels::numerics_name(n) << " " << checks[0][i].name;
      if (n == Numerics::kExact) {
        EXPECT_EQ(checks[1][i].rel_l2, 0.0) << checks[1][i].name;
      }
    }
  }
}

TEST(LinearTiles, ManyWorkerTilesKeepEveryRowsBits) {
  struct Case {
    WeightFormat f;
    int64_t out, in;
    bool round_input;
  };
  const Case cases[] = {{WeightFormat::kDense, 24, 4096, false},
                        {WeightFormat::kFp8Block, 512, 4096, true},
                        {WeightFormat::kFp8Block, 40, 2048, false},
                        {WeightFormat::kFp4Block, 32, 4096, true},
                        {WeightFormat::kBf16, 48, 3072, false},
                        {WeightFormat::kDense, 1100, 64, false}};
  CountingObserver seen;
  auto wide = ThreadPool::simulated(64, &seen);
  const int64_t m = 64;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "format " << static_cast<int>(c.f) << " out " << c.out << " in " << c.in);
    const Linear l = random_linear(c.f, c.out, c.in, c.round_input, 3);
    std::vector<float> x(m * c.in);
    std::mt19937 rng(4);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
    for (Numerics n : {Numerics::kExact, Numerics::kFast}) {
      const auto here = forward(l, n, x, m);
      std::vector<float> there;
      {
        ThreadPool::Scope scope(wide.get());
        there = forward(l, n, x, m);
      }
      EXPECT_TRUE(same_bits(here.data(), there.data(), m * c.out)) << kernels::numerics_name(n);
      for (int64_t r : {int64_t{0}, int64_t{37}, m - 1}) {
        const std::vector<float> row(x.begin() + r * c.in, x.begin() + (r + 1) * c.in);
        EXPECT_TRUE(same_bits(forward(l, n, row, 1).data(), here.data() + r * c.out, c.out))
            << kernels::numerics_name(n) << " row " << r;
      }
      if (n == Numerics::kExact) continue;
      const auto exact = forward(l, Numerics::kExact, x, m);
      double worst = 0, largest = 0;
      for (int64_t i = 0; i < m * c.out; ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(here[i]) - exact[i]));
        largest = std::max(largest, std::abs(static_cast<double>(exact[i])));
      }
      EXPECT_LT(worst, 1e-5 * largest);
    }
  }
  EXPECT_FALSE(seen.job_tiles.empty());
}

// A prefill chunk's product of few panels splits its rows into as many
// tiles as the pool takes: on 192 workers, 4 a worker (256 tiles, as for
// 64 workers, left a third of them two tiles of milliseconds to the
// others' one), with the bits of one worker's run.
TEST(LinearTiles, APrefillProductKeepsEveryWorkerOfABigNodeBusy) {
  const Linear l = random_linear(WeightFormat::kFp8Block, 1024, 128, false, 9);  // 64 panels
  const int64_t m = 512;
  std::vector<float> x(m * l.in);
  std::mt19937 rng(10);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  const std::vector<float> alone = forward(l, Numerics::kFast, x, m);
  for (int workers : {64, 192}) {
    CountingObserver seen;
    auto pool = ThreadPool::simulated(workers, &seen);
    ThreadPool::Scope scope(pool.get());
    const std::vector<float> y = forward(l, Numerics::kFast, x, m);
    EXPECT_TRUE(same_bits(alone.data(), y.data(), m * l.out)) << workers;
    ASSERT_EQ(seen.job_tiles.size(), 1u) << workers;
    EXPECT_EQ(seen.job_tiles[0], std::max<int64_t>(256, workers * ThreadPool::kChunksPerThread)) << workers;
  }
}

// A layer's independent products (an expert's w1 and w3, every active
// expert's, wq_a beside wkv) as one pool job: each product's numbers are
// what it gives alone, and a decode step's products cost one job, whatever
// their formats and row counts.
TEST(LinearTiles, ProductsInOneJobGiveEachProductsBits) {
  const Linear layers[] = {random_linear(WeightFormat::kFp8Block, 512, 4096, true, 5),
                           random_linear(WeightFormat::kFp4Block, 96, 2048, true, 6),
                           random_linear(WeightFormat::kBf16, 48, 1024, false, 7),
                           random_linear(WeightFormat::kDense, 24, 4096, false, 8)};
  for (Numerics n : {Numerics::kExact, Numerics::kFast}) {
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{80}}) {
      SCOPED_TRACE(::testing::Message() << kernels::numerics_name(n) << " rows " << m);
      std::vector<std::vector<float>> x, alone, together;
      std::vector<LinearProduct> products;
      for (size_t i = 0; i < std::size(layers); ++i) {
        // The second product takes one row fewer: products need not agree.
        const int64_t rows = i == 1 && m > 1 ? m - 1 : m;
        std::mt19937 rng(static_cast<uint32_t>(10 + i));
        std::normal_distribution<float> normal(0.0f, 1.0f);
        x.emplace_back(rows * layers[i].in);
        for (float& v : x.back()) v = normal(rng);
        alone.push_back(forward(layers[i], n, x.back(), rows));
        together.emplace_back(rows * layers[i].out, -1.0f);
      }
      for (size_t i = 0; i < std::size(layers); ++i)
        products.push_back({&layers[i], x[i].data(), static_cast<int64_t>(x[i].size()) / layers[i].in,
                            together[i].data()});
      // A product of the first one's input (w3 beside w1): rounded once, shared.
      const Linear beside = random_linear(WeightFormat::kFp8Block, 256, 4096, true, 9);
      const std::vector<float> beside_alone = forward(beside, n, x[0], m);
      std::vector<float> beside_together(m * beside.out, -1.0f);
      products.push_back({&beside, x[0].data(), m, beside_together.data()});
      CountingObserver seen;
      auto wide = ThreadPool::simulated(64, &seen);
      {
        ThreadPool::Scope scope(wide.get());
        linear_forward_all(kernels::kernels_for(n), products);
      }
      for (size_t i = 0; i < std::size(layers); ++i)
        EXPECT_TRUE(same_bits(alone[i].data(), together[i].data(), static_cast<int64_t>(alone[i].size()))) << "product " << i;
      EXPECT_TRUE(same_bits(beside_alone.data(), beside_together.data(), m * beside.out));
      // Inputs of more than 8192 values are rounded first, in one job, in
      // pieces of 512 (the FP8 product's rows 8 pieces each, the FP4 one's
      // 4; the one beside shares the first's), 4 pieces a tile. Smaller ones
      // (a decode step's row) are rounded by each task that uses them. Then
      // one job: a tile for each panel of every product (59 for 64 workers).
      if (m >= 8) continue;
      const int64_t fp4_rows = m > 1 ? m - 1 : m;
      const int64_t pieces = (m * 4096 > 8192 ? m * 8 : 0) + (fp4_rows * 2048 > 8192 ? fp4_rows * 4 : 0);
      std::vector<int64_t> tiles;
      if (pieces > 0) tiles.push_back((pieces + 3) / 4);
      tiles.push_back(32 + 6 + 3 + 2 + 16);
      EXPECT_EQ(seen.job_tiles, tiles);
      if (m == 1) {
        EXPECT_EQ(wide->jobs(), 1);  // a decode row: one job for all five products
      }
    }
  }
}

// A decode step's job that mixes formats (three routed experts' FP4 w1
// beside the shared expert's FP8 w1, more panels than 64 workers take one
// by one) gives its tasks about the same weight bytes, the FP8 panels two
// a task and the FP4 ones four; an even count of panels a task would give
// some tasks 1.4 times the mean. The numbers stay each product's own.
// The weight bytes each tile of a simulated pool's last job read.
struct BytesByTile : JobObserver {
  std::vector<int64_t> bytes;
  void read(const void*, int64_t n) override {
    if (!bytes.empty()) bytes.back() += n;
  }
  void job_begins(int64_t) override { bytes.clear(); }
  void tile_begins(int64_t) override { bytes.push_back(0); }
  void tile_ends(double) override {}
  void job_ends() override {}
  void phase_changes(Phase, Phase) override {}
};

TEST(LinearTiles, AJobMixingFormatsGivesItsTasksEqualBytes) {
  std::vector<Linear> layers;
  for (uint32_t seed : {41u, 42u, 43u}) layers.push_back(random_linear(WeightFormat::kFp4Block, 2048, 4096, true, seed));
  layers.push_back(random_linear(WeightFormat::kFp8Block, 1024, 4096, true, 44));
  std::vector<float> x(4096);
  std::mt19937 rng(45);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  std::vector<std::vector<float>> y;
  std::vector<LinearProduct> products;
  for (const Linear& l : layers) y.emplace_back(l.out);
  for (size_t i = 0; i < layers.size(); ++i) products.push_back({&layers[i], x.data(), 1, y[i].data()});
  BytesByTile seen;
  auto wide = ThreadPool::simulated(64, &seen);
  {
    ThreadPool::Scope scope(wide.get());
    linear_forward_all(kernels::kernels_for(Numerics::kFast), products);
  }
  ASSERT_EQ(seen.bytes.size(), 256u);  // 4 tasks a worker
  int64_t total = 0, most = 0;
  for (int64_t b : seen.bytes) total += b, most = std::max(most, b);
  const double mean = static_cast<double>(total) / static_cast<double>(seen.bytes.size());
  EXPECT_LT(static_cast<double>(most), 1.1 * mean) << "mean " << mean;
  for (size_t i = 0; i < layers.size(); ++i)
    EXPECT_TRUE(same_bits(forward(layers[i], Numerics::kFast, x, 1).data(), y[i].data(), layers[i].out)) << "product " << i;
}

// A product job's tile order is kept for the next job of the same products
// (a decode step makes the same ones every step); a job of other rows, or
// on a pool of another size, gets its own. Each is the order a thread that
// has kept none makes, and the products' numbers are their own.
TEST(LinearTiles, AKeptTileOrderIsTheOneItsProductsGet) {
  std::vector<Linear> layers;
  for (uint32_t seed : {51u, 52u}) layers.push_back(random_linear(WeightFormat::kFp4Block, 2048, 4096, true, seed));
  layers.push_back(random_linear(WeightFormat::kFp8Block, 1024, 4096, true, 53));
  std::mt19937 rng(54);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(80 * 4096);
  for (float& v : x) v = normal(rng);
  // Each task's weight bytes in a job of every layer over m rows on a pool
  // of `workers`.
  auto task_bytes = [&](int workers, int64_t m) {
    std::vector<std::vector<float>> y;
    std::vector<LinearProduct> products;
    for (const Linear& l : layers) y.emplace_back(m * l.out);
    for (size_t i = 0; i < layers.size(); ++i) products.push_back({&layers[i], x.data(), m, y[i].data()});
    BytesByTile seen;
    auto pool = ThreadPool::simulated(workers, &seen);
    {
      ThreadPool::Scope scope(pool.get());
      linear_forward_all(kernels::kernels_for(Numerics::kFast), products);
    }
    for (size_t i = 0; i < layers.size(); ++i)
      EXPECT_TRUE(same_bits(forward(layers[i], Numerics::kFast, x, m).data(), y[i].data(), m * layers[i].out))
          << "product " << i << " rows " << m << " workers " << workers;
    return seen.bytes;
  };
  const std::pair<int, int64_t> jobs[] = {{64, 1}, {128, 1}, {64, 80}, {64, 1}, {128, 1}};
  std::vector<std::vector<int64_t>> fresh;  // each on a thread that kept no order
  for (const auto& [workers, m] : jobs) std::thread([&, w = workers, rows = m] { fresh.push_back(task_bytes(w, rows)); }).join();
  EXPECT_NE(fresh[0], fresh[1]);
  EXPECT_NE(fresh[0], fresh[2]);
  EXPECT_GT(fresh[1].size(), fresh[0].size());  // 128 workers take more tasks
  for (size_t j = 0; j < std::size(jobs); ++j)
    EXPECT_EQ(task_bytes(jobs[j].first, jobs[j].second), fresh[j]) << "job " << j << " on one thread";
}

// A product's `written` callback hears of every output exactly once, from
// the task that wrote it, after its final value is in place (SwiGLU runs
// there, on the pieces w1 and w3 have completed).
TEST(LinearTiles, WrittenHearsOfEveryOutputOnceAfterItIsFinal) {
  const Linear layers[] = {random_linear(WeightFormat::kFp8Block, 512, 4096, true, 21),
                           random_linear(WeightFormat::kFp4Block, 96, 2048, true, 22),
                           random_linear(WeightFormat::kDense, 24, 1024, false, 23)};
  ThreadPool four(4);
  for (int64_t m : {int64_t{1}, int64_t{5}, int64_t{70}}) {
    SCOPED_TRACE(::testing::Message() << "rows " << m);
    std::vector<std::vector<float>> x, expected, y;
    std::vector<std::vector<std::atomic<int>>> heard;
    std::vector<WrittenFn> written;
    std::atomic<int64_t> early{0};
    for (size_t i = 0; i < std::size(layers); ++i) {
      std::mt19937 rng(static_cast<uint32_t>(30 + i));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      x.emplace_back(m * layers[i].in);
      for (float& v : x.back()) v = normal(rng);
      expected.push_back(forward(layers[i], Numerics::kFast, x.back(), m));
      y.emplace_back(m * layers[i].out, -1.0f);
      heard.emplace_back(m * layers[i].out);
    }
    for (size_t i = 0; i < std::size(layers); ++i)
      written.push_back([&, i](int64_t r0, int64_t r1, int64_t f0, int64_t f1) {
        const int64_t out = layers[i].out;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t f = f0; f < f1; ++f) {
            heard[i][r * out + f].fetch_add(1);
            if (!same_bits(&y[i][r * out + f], &expected[i][r * out + f], 1)) early.fetch_add(1);
          }
      });
    std::vector<LinearProduct> products;
    for (size_t i = 0; i < std::size(layers); ++i)
      products.push_back({&layers[i], x[i].data(), m, y[i].data(), &written[i]});
    {
      ThreadPool::Scope scope(&four);
      linear_forward_all(kernels::kernels_for(Numerics::kFast), products);
    }
    EXPECT_EQ(early.load(), 0);
    for (size_t i = 0; i < std::size(layers); ++i) {
      EXPECT_TRUE(same_bits(expected[i].data(), y[i].data(), m * layers[i].out)) << "product " << i;
      int64_t not_once = 0;
      for (const std::atomic<int>& h : heard[i]) not_once += h.load() != 1;
      EXPECT_EQ(not_once, 0) << "product " << i;
    }
  }
}

// Two ranks placed on a simulated machine of two 64-core nodes, each on a
// simulated pool of 64 workers: every weight and KV page is bound to its
// rank's node, every weight byte a forward reads is on the reading rank's
// node, and the tokens are the unplaced ranks'.
void expect_ranks_read_only_their_node(const std::string& dir) {
  auto machine = MachineTopology::synthetic("package:2 numa:1 core:64 pu:1");
  ASSERT_TRUE(machine.ok()) << machine.status().message();
  auto placement = place_ranks(*machine, NumaMode::kAuto, {});
  ASSERT_TRUE(placement.ok()) << placement.status().message();
  ASSERT_EQ(placement->ranks.size(), 2u);
  auto config = load_any_model_config(dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status().message();
  ModelOptions fast;
  fast.numerics = Numerics::kFast;
  auto generate = [&](const ParallelOptions& p, LocalExecutor** exec_out) {
    EngineOptions options;
    auto cache = Engine::cache_options(*config, options);
    EXPECT_TRUE(cache.ok()) << cache.status().message();
    auto exec = LocalExecutor::create(dir, fast, p, *cache);
    EXPECT_TRUE(exec.ok()) << exec.status().message();
    if (exec_out) *exec_out = exec->get();
    auto engine = Engine::create(std::move(*exec), options.scheduler);
    EXPECT_TRUE(engine.ok()) << engine.status().message();
    auto out = testing::greedy_after_fixed_prompt(**engine);
    return std::make_pair(out, std::move(*engine));
  };
  ParallelOptions unplaced;
  unplaced.topology = placement->layout;
  const auto want = generate(unplaced, nullptr).first;
  ASSERT_EQ(want.size(), 8u);

  SimulatedMachine m;
  m.nodes = 2;
  m.cores = 128;
  RecordedMemoryBinding memory;
  std::vector<std::unique_ptr<SimulatedRank>> sims;
  for (const RankPlacement& r : placement->ranks)
    sims.push_back(std::make_unique<SimulatedRank>(m, r.node, static_cast<int>(r.cpus.size()), &memory));
  ParallelOptions placed = unplaced;
  placed.placement = placement->ranks;
  placed.memory = &memory;
  placed.rank_pools = [&](int r) { return sims[r]->make_pool(); };
  LocalExecutor* exec = nullptr;
  auto [got, engine] = generate(placed, &exec);
  EXPECT_EQ(got, want);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(::testing::Message() << "rank " << r);
    const int node = placement->ranks[r].node;
    // Its weights and its copy of the KV pages, on its node.
    EXPECT_EQ(memory.bytes_on(node), exec->resident_bytes(r) + engine->cache(0).store(r).bytes());
    const PhaseLoad t = total_of(sims[r]->loads());
    EXPECT_GT(t.jobs, 0);
    EXPECT_GT(t.local, 0);
    EXPECT_EQ(t.remote, 0);
    EXPECT_EQ(t.unplaced, 0);
  }
}

TEST(LinearTiles, RanksOnASimulatedTwoNodeMachineReadOnlyTheirNode) {
  expect_ranks_read_only_their_node(testing::golden_dir() + "/small-real");
}

// DeepSeek-V4.1 too: its mHC mixing weights, norms and sinks as well as its
// linears (its Engram tables stay in the files' shared mapping).
TEST(LinearTiles, V41RanksOnASimulatedTwoNodeMachineReadOnlyTheirNode) {
  expect_ranks_read_only_their_node(golden_v41_dir("v41-fp8"));
}

}  // namespace
}  // namespace dsv4
