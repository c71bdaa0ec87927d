// Collectives of the local (threads) backend, sub-groups, the sharded
// greedy argmax, and topology validation.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>
#include <thread>

#include "base/thread_pool.h"
#include "dist/local_communicator.h"
#include "dist/topology.h"
#include "dist/vocab_argmax.h"
#include "model/expert_dispatch.h"
#include "model/token_split.h"
#include "collective_checks.h"
#include "test_util.h"

namespace dsv4 {
namespace {

// Runs fn(comm) on `size` threads, one rank each.
void on_ranks(int size, const std::function<void(Communicator&)>& fn) {
  auto comms = LocalCommunicator::create(size);
  std::vector<std::thread> threads;
  for (auto& c : comms) threads.emplace_back([&fn, &c] { fn(*c); });
  for (auto& t : threads) t.join();
}

float value(int rank, int i) { return std::sin(0.37f * i + rank) * std::pow(10.0f, (i + rank) % 7 - 3); }

TEST(LocalCommunicator, AllReduceAddsInRankOrderOnEveryRank) {
  const int size = 4, n = 1000;
  std::vector<float> expect(n);
  for (int i = 0; i < n; ++i) {
    float s = value(0, i);
    for (int r = 1; r < size; ++r) s += value(r, i);
    expect[i] = s;
  }
  on_ranks(size, [&](Communicator& c) {
    std::vector<float> x(n);
    for (int i = 0; i < n; ++i) x[i] = value(c.rank(), i);
    c.all_reduce_sum(x.data(), n);
    EXPECT_EQ(x, expect) << "rank " << c.rank();
  });
}

TEST(LocalCommunicator, EveryCollectiveOnOneToFiveRanks) {
  for (int size = 1; size <= 5; ++size)
    on_ranks(size, [&](Communicator& c) { EXPECT_EQ(testing::run_collective_checks(c), "") << size << " ranks"; });
}

TEST(LocalCommunicator, GatherBroadcastAllToAllAndReduceScatter) {
  const int size = 3;
  on_ranks(size, [&](Communicator& c) {
    const int me = c.rank();
    // all_gather
    int64_t mine[2] = {me, me * 10};
    std::vector<int64_t> all(2 * size);
    c.all_gather(mine, sizeof mine, all.data());
    for (int r = 0; r < size; ++r) EXPECT_EQ(all[2 * r + 1], r * 10);
    // broadcast from rank 2
    double v = me == 2 ? 3.25 : 0.0;
    c.broadcast(&v, sizeof v, 2);
    EXPECT_EQ(v, 3.25);
    // all_to_all_v: rank i sends (i + j) ints of value 100*i + j to rank j
    std::vector<int32_t> send;
    std::vector<size_t> sb(size), rb(size);
    for (int j = 0; j < size; ++j) {
      for (int k = 0; k < me + j; ++k) send.push_back(100 * me + j);
      sb[j] = 4 * (me + j);
      rb[j] = 4 * (j + me);
    }
    size_t total = 0;
    for (size_t b : rb) total += b / 4;
    std::vector<int32_t> recv(total);
    c.all_to_all_v(send.data(), sb, recv.data(), rb);
    size_t at = 0;
    for (int j = 0; j < size; ++j)
      for (int k = 0; k < j + me; ++k) EXPECT_EQ(recv[at++], 100 * j + me);
    // reduce_scatter over 7 values: chunks of 3, the last one short
    std::vector<float> x(7);
    for (int i = 0; i < 7; ++i) x[i] = static_cast<float>(i + me);
    std::vector<float> part(3);
    const int64_t got = c.reduce_scatter_sum_padded(x.data(), 7, part.data());
    EXPECT_EQ(got, me == 2 ? 1 : 3);
    for (int64_t i = 0; i < got; ++i) EXPECT_EQ(part[i], 3.0f * (3 * me + i) + 3.0f);
  });
}

TEST(LocalCommunicator, SplitIntoTensorAndDataParallelGroups) {
  // 4 ranks as TP2 x DP2: TP groups {0,1} {2,3}, DP groups {0,2} {1,3}.
  on_ranks(4, [&](Communicator& world) {
    const int r = world.rank();
    auto tp = world.split(r / 2, r % 2);
    auto dp = world.split(r % 2, r / 2);
    EXPECT_EQ(tp->size(), 2);
    EXPECT_EQ(tp->rank(), r % 2);
    EXPECT_EQ(dp->rank(), r / 2);
    float x = static_cast<float>(r);
    tp->all_reduce_sum(&x, 1);
    EXPECT_EQ(x, r < 2 ? 1.0f : 5.0f);
    float y = static_cast<float>(r);
    dp->all_reduce_sum(&y, 1);
    EXPECT_EQ(y, r % 2 ? 4.0f : 2.0f);
  });
}

TEST(ShardedArgmax, EqualsTheArgmaxOfTheWholeRow) {
  const int tp = 4, rows = 5, vocab = 512, n = vocab / tp;
  std::mt19937 gen(3);
  std::normal_distribution<float> dist;
  std::vector<float> logits(rows * vocab);
  for (float& v : logits) v = dist(gen);
  logits[1 * vocab + 10] = logits[1 * vocab + 300] = 9.0f;  // a tie across shards: the lower id wins
  std::vector<int32_t> expect(rows);
  for (int r = 0; r < rows; ++r)
    expect[r] = static_cast<int32_t>(std::max_element(&logits[r * vocab], &logits[(r + 1) * vocab]) - &logits[r * vocab]);
  ASSERT_EQ(expect[1], 10);
  on_ranks(tp, [&](Communicator& c) {
    std::vector<float> slice(rows * n);
    for (int r = 0; r < rows; ++r)
      std::copy_n(&logits[r * vocab + c.rank() * n], n, &slice[r * n]);
    std::vector<int32_t> got(rows);
    sharded_argmax(c, slice.data(), rows, n, c.rank() * n, got.data());
    EXPECT_EQ(got, expect);
  });
}

// A shard's best is what a left-to-right scan keeping the first strictly
// larger value finds: ties to the first place (within a shard too, in any
// lane), NaNs never chosen unless the first value is one, -0 equal to +0.
TEST(ShardedArgmax, IsTheFirstPlaceAScanWithGreaterThanFinds) {
  auto scan = [](const std::vector<float>& x) {
    int64_t best = 0;
    for (int64_t i = 1; i < static_cast<int64_t>(x.size()); ++i)
      if (x[i] > x[best]) best = i;
    return static_cast<int32_t>(best);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::mt19937 gen(11);
  std::normal_distribution<float> dist;
  std::vector<std::vector<float>> rows;
  for (int64_t n : {1, 15, 16, 17, 100, 1003}) {
    std::vector<float> x(n);
    for (float& v : x) v = dist(gen);
    rows.push_back(x);
    if (n < 17) continue;
    x[n - 1] = x[5] = 50.0f;  // a tie in other lanes and past the last whole run of lanes
    rows.push_back(x);
    x[2] = nan;  // a NaN is never the best
    x[n - 2] = nan;
    rows.push_back(x);
    x[0] = nan;  // unless it comes first
    rows.push_back(x);
  }
  // A vocabulary shard's row, scanned in pieces (of 1024 on 16 threads):
  // the same place.
  {
    const int64_t n = 3 * 4096 + 17;
    std::vector<float> x(n);
    for (float& v : x) v = dist(gen);
    rows.push_back(x);
    x[4096 + 7] = x[3 * 4096 + 3] = 60.0f;  // a tie across pieces
    rows.push_back(x);
    x[4096] = nan;  // a piece starting with a NaN, its best later in it
    x[4096 + 9] = 70.0f;
    rows.push_back(x);
    x[4096 + 9] = 0.0f;  // ... or in a later piece
    rows.push_back(x);
    x[0] = nan;  // the row's first value a NaN
    rows.push_back(x);
    std::vector<float> low(n, -inf);  // pieces of -inf, a larger value in the last
    low[3 * 4096 + 1] = -5.0f;
    rows.push_back(low);
    low[2 * 4096] = nan;
    rows.push_back(low);
  }
  rows.push_back({-0.0f, 0.0f, -1.0f});
  rows.push_back({-1.0f, 0.0f, -0.0f, 0.0f});
  rows.push_back(std::vector<float>(40, -inf));
  for (const std::vector<float>& x : rows) {
    const auto n = static_cast<int64_t>(x.size());
    on_ranks(1, [&](Communicator& c) {
      ThreadPool pool(16);
      ThreadPool::Scope scope(&pool);
      int32_t got = -1;
      sharded_argmax(c, x.data(), 1, n, 0, &got);
      EXPECT_EQ(got, scan(x)) << "a row of " << n;
    });
  }
}

// Two ranks of two experts each; each rank's two rows choose three experts,
// two of them on the other rank. Every slot's output must be its expert's
// on its row, and a row must travel once to each rank its slots choose,
// not once a slot.
TEST(ExpertDispatch, ARowTravelsOnceToEachRankItsSlotsChoose) {
  const int64_t dim = 64, rows = 2;
  const int k = 3, experts = 4;
  const int32_t chosen[2][rows * k] = {{2, 3, 0, 3, 2, 1}, {0, 1, 2, 1, 0, 3}};
  // Expert e scales each row by (e + 1) and by the slot's weight.
  auto expert_output = [](float x, int e, float w) { return x * static_cast<float>(e + 1) * w; };
  on_ranks(2, [&](Communicator& c) {
    const int me = c.rank();
    std::vector<float> x(rows * dim), weights(rows * k);
    SlotOutputs out;
    for (int64_t i = 0; i < rows * dim; ++i) x[i] = value(me, static_cast<int>(i));
    for (int64_t i = 0; i < rows * k; ++i) weights[i] = 0.5f + 0.25f * static_cast<float>(i + me);
    const ExpertSlots slots{chosen[me], weights.data(), rows, k, experts};
    const RunExperts run = [&](const std::vector<ExpertRows>& held) {
      for (const ExpertRows& e : held) {
        EXPECT_EQ(e.expert / 2, me) << "an expert ran on a rank that does not hold it";
        for (int64_t i = 0; i < e.n; ++i)
          for (int64_t d = 0; d < dim; ++d)
            e.y[i * dim + d] = expert_output(e.x[i * dim + d], e.expert, e.row_weights[i]);
      }
    };
    const int64_t sent_before = c.traffic().bytes;
    run_expert_slots(slots, x.data(), dim, &c, run, &out);
    const int64_t sent = c.traffic().bytes - sent_before;
    for (int64_t s = 0; s < rows * k; ++s)
      for (int64_t d = 0; d < dim; ++d)
        ASSERT_EQ(out.of_slot[s][d], expert_output(x[s / k * dim + d], chosen[me][s], weights[s]))
            << "rank " << me << " slot " << s;
    // To the other rank: its slot and row counts (16 bytes), four slot
    // headers (one 64-byte line) and the two rows once each; back to it:
    // the outputs of its four slots that ran here.
    const int64_t row_bytes = dim * static_cast<int64_t>(sizeof(float));
    EXPECT_EQ(sent, 16 + (64 + 2 * row_bytes) + 4 * row_bytes) << "rank " << me;
  });
}

// A decode batch's gathered rows and columns are copied straight into
// place by the pool's workers, a piece of 4 KiB each, in one job: at a
// grain of 16 rows, 16 rows of 16 KiB were one task, copied on the rank's
// thread while every other worker waited, and the gather went through a
// buffer and a second job. Copies of less than 128 KiB in all stay on the
// calling thread.
TEST(TokenSplit, ABatchsGatheredRowsAreCopiedByTheWorkers) {
  struct JobSizes : JobObserver {
    std::vector<int64_t> tiles;
    void read(const void*, int64_t) override {}
    void phase_changes(Phase, Phase) override {}
    void job_begins(int64_t n) override { tiles.push_back(n); }
    void tile_begins(int64_t) override {}
    void tile_ends(double) override {}
    void job_ends() override {}
  };
  const int64_t rows = 16, width = 2048;
  on_ranks(2, [&](Communicator& c) {
    JobSizes jobs;
    auto pool = ThreadPool::simulated(64, &jobs);
    ThreadPool::Scope scope(pool.get());
    const TokenSplit split = TokenSplit::of(rows, &c);
    // Columns: each rank's `width` columns of every row, side by side.
    std::vector<float> cols(rows * width), all(rows * 2 * width);
    for (int64_t i = 0; i < rows * width; ++i) cols[i] = value(c.rank(), static_cast<int>(i));
    gather_columns(&c, split, cols.data(), width, all.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int b = 0; b < 2; ++b)
        for (int64_t j = 0; j < width; ++j)
          ASSERT_EQ(all[(r * 2 + b) * width + j], value(b, static_cast<int>(r * width + j))) << r << " " << b << " " << j;
    // The ranks' 256 KiB, in pieces of 4 KiB, straight into place: one job.
    ASSERT_EQ(jobs.tiles.size(), 1u);
    EXPECT_EQ(jobs.tiles[0], 64);
    // Rows: each rank's block of 8 rows, one after the other.
    std::vector<float> mine(split.count() * 2 * width), gathered(rows * 2 * width);
    for (int64_t i = 0; i < split.count() * 2 * width; ++i) mine[i] = value(c.rank(), static_cast<int>(i));
    gather_rows(&c, split, mine.data(), 2 * width, gathered.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < 2 * width; ++j)
        ASSERT_EQ(gathered[r * 2 * width + j], value(static_cast<int>(r / 8), static_cast<int>(r % 8 * 2 * width + j)))
            << r << " " << j;
    ASSERT_EQ(jobs.tiles.size(), 2u);
    EXPECT_EQ(jobs.tiles[1], 64);
    // Two rows of 8 KiB: no job.
    const TokenSplit two = TokenSplit::of(2, &c);
    gather_rows(&c, two, mine.data(), width, gathered.data());
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t j = 0; j < width; ++j) ASSERT_EQ(gathered[r * width + j], value(static_cast<int>(r), static_cast<int>(j)));
    EXPECT_EQ(jobs.tiles.size(), 2u);
  });
}

TEST(Topology, ValidatesShapesWithClearErrors) {
  const ModelConfig& c = testing::golden_model("small-real").config();  // 4 heads, 2 groups, 16 experts
  auto ok = Topology::make({2, 2, 4}, c);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->world, 4);
  EXPECT_EQ(ok->describe(), "4 ranks: TP2 x DP2, EP4");
  EXPECT_EQ(ok->tp_rank(3), 1);
  EXPECT_EQ(ok->dp_rank(3), 1);
  EXPECT_EQ(Topology::make({1, 1, 0}, c)->ep, 1);
  EXPECT_TRUE(Topology::make({4, 4, 16}, c).ok()) << "two ranks share each output group";
  for (const auto& [o, world, words] : std::vector<std::tuple<TopologyOptions, int, std::string>>{
           {{8, 1, 0}, 0, "--tp 8 must divide the 4 attention heads"},
           {{3, 1, 1}, 0, "--tp 3 must divide the 4 attention heads"},
           {{2, 3, 4}, 0, "--ep 4 must divide the 6 ranks"},
           {{2, 2, 3}, 0, "--ep 3 must divide the 4 ranks"},
           {{1, 1, 0}, 4, "1 ranks, but 4 processes were started"},
           {{0, 1, 0}, 0, "at least 1"},
       }) {
    auto t = Topology::make(o, c, world);
    ASSERT_FALSE(t.ok()) << words;
    EXPECT_NE(t.status().message().find(words), std::string::npos) << t.status().message();
  }
}

}  // namespace
}  // namespace dsv4
