// Prefix caching: a request whose prompt starts with blocks an earlier one
// computed takes their pages and computes only the rest, with exactly the
// logits and tokens of a cold run; multi-turn chats hit everything before
// the new turn; the cache gives up blocks under page pressure; data-parallel
// partitions send a request where its prefix is; speculation on top changes
// nothing.
//
// Exactness: the reference computes a prompt position with its indexer
// ranking prompt_len / 4 entries, and breaks exact score ties (ReLU zeros)
// in an order that depends on that length. Rows an earlier prompt of
// another length class computed can therefore differ from a cold run in
// those ties (the reference itself differs between the two prompts), and
// the QAT rounding of the cached rows carries such differences on. A hit is
// bit-exact when the earlier prompt had the same length / 4, which the
// exact tests here use; other lengths hit too and stay within the bounds
// ../shared/golden/README.md gives any correct implementation.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

#include "runtime/engine.h"
#include "runtime/local_executor.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using testing::golden_dir;
using testing::golden_model;
using testing::greedy;

std::vector<int32_t> tokens(int64_t n, int seed, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 131 + seed * 7919 + 17) % vocab);
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Served {
  std::vector<int32_t> tokens;
  std::map<int64_t, std::vector<float>> logits;  // position -> logits
  int64_t cached = -1;
};

class Server {
 public:
  explicit Server(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {
    const int64_t vocab = engine_->config().vocab_size;
    engine_->set_logits_observer([this, vocab](int64_t id, int64_t pos, const float* l) {
      runs_[id].logits[pos].assign(l, l + vocab);
    });
  }
  Served run(const std::vector<int32_t>& prompt, const SamplingParams& params) {
    auto id = engine_->add_request(prompt, params);
    EXPECT_TRUE(id.ok()) << id.status().message();
    drain();
    return runs_[*id];
  }
  // Runs every queued request to its end.
  void drain() {
    while (engine_->has_unfinished()) {
      for (const RequestOutput& o : engine_->step()) {
        Served& s = runs_[o.id];
        s.tokens.insert(s.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
        s.cached = o.cached_tokens;
      }
    }
  }
  Engine& engine() { return *engine_; }

 private:
  std::unique_ptr<Engine> engine_;
  std::map<int64_t, Served> runs_;
};

EngineOptions options(int64_t memory = int64_t{256} << 20) {
  EngineOptions o;
  o.scheduler.max_num_seqs = 4;
  o.cache.memory_bytes = memory;
  return o;
}

Server server(const DeepseekV4& model, EngineOptions o = options()) {
  auto e = Engine::create(&model, o);
  EXPECT_TRUE(e.ok()) << e.status().message();
  return Server(std::move(*e));
}

void expect_identical(const Served& got, const Served& cold, const std::string& what) {
  EXPECT_EQ(got.tokens, cold.tokens) << what;
  ASSERT_EQ(got.logits.size(), cold.logits.size()) << what;
  for (const auto& [pos, row] : cold.logits)
    EXPECT_EQ(0, std::memcmp(got.logits.at(pos).data(), row.data(), sizeof(float) * row.size()))
        << what << ": logits at position " << pos << " differ";
}

TEST(PrefixCache, SharedPrefixIsReusedAndChangesNoBit) {
  // The README's prefill_logits bound for a correct implementation.
  for (auto [name, bound] : {std::pair{"small-real", 0.02}, std::pair{"small-fp8", 0.2}}) {
    const DeepseekV4& model = golden_model(name);
    const int64_t vocab = model.config().vocab_size;
    const std::vector<int32_t> prefix = tokens(384, 1, vocab);
    const std::vector<int32_t> a = concat(prefix, tokens(77, 2, vocab)), b = concat(prefix, tokens(77, 3, vocab));
    const Served cold = server(model).run(b, greedy(12));
    EXPECT_EQ(cold.cached, 0);

    Server warm = server(model);
    EXPECT_EQ(warm.run(a, greedy(5)).cached, 0);
    const Served hit = warm.run(b, greedy(12));
    EXPECT_EQ(hit.cached, 384) << name;
    expect_identical(hit, cold, name);
    EXPECT_EQ(warm.engine().stats().prefix_hit_tokens, 384);
    EXPECT_EQ(warm.engine().stats().prefix_queried_tokens, static_cast<int64_t>(a.size() + b.size()));
    EXPECT_EQ(warm.engine().cache().pages_in_use(), 0) << "requests hold no page once done";

    // The same prompt again: everything but its last block's remainder.
    const Served again = warm.run(b, greedy(12));
    EXPECT_EQ(again.cached, 384);
    expect_identical(again, cold, name);

    // A prompt of another length hits the same blocks.
    const std::vector<int32_t> c = concat(prefix, tokens(100, 4, vocab));
    const Served c_cold = server(model).run(c, greedy(12));
    const Served c_hit = warm.run(c, greedy(12));
    EXPECT_EQ(c_hit.cached, 384);
    const int64_t first = static_cast<int64_t>(c.size()) - 1;
    EXPECT_LE(testing::rel_l2(c_hit.logits.at(first).data(), c_cold.logits.at(first).data(), vocab), bound) << name;
    EXPECT_EQ(c_hit.tokens[0], c_cold.tokens[0]) << name;
  }
}

// A hit's first chunk recomputes the 4 positions before the hit; with
// chunks of at most 3 tokens it ends before the shared blocks do (and has
// allocated nothing but its state pages), and the request still matches a
// cold run bit for bit.
TEST(PrefixCache, HitResumedInChunksShorterThanTheRecomputedPositions) {
  const DeepseekV4& model = golden_model("small-real");
  const int64_t vocab = model.config().vocab_size;
  const std::vector<int32_t> prefix = tokens(256, 6, vocab);
  const std::vector<int32_t> a = concat(prefix, tokens(30, 7, vocab)), b = concat(prefix, tokens(30, 8, vocab));
  EngineOptions o = options();
  o.scheduler.long_prefill_token_threshold = 3;
  const Served cold = server(model, o).run(b, greedy(6));
  Server warm = server(model, o);
  warm.run(a, greedy(2));
  const Served hit = warm.run(b, greedy(6));
  EXPECT_EQ(hit.cached, 256);
  expect_identical(hit, cold, "chunks of 3");
}

TEST(PrefixCache, PromptEndingAtTheBoundaryIsReusedToo) {
  const DeepseekV4& model = golden_model("small-real");
  const int64_t vocab = model.config().vocab_size;
  const std::vector<int32_t> prefix = tokens(256, 4, vocab), b = concat(prefix, tokens(40, 5, vocab));
  const Served cold = server(model).run(b, greedy(8));
  Server warm = server(model);
  warm.run(prefix, greedy(3));
  const Served hit = warm.run(b, greedy(8));
  EXPECT_EQ(hit.cached, 256);
  EXPECT_EQ(hit.tokens, cold.tokens);
}

TEST(PrefixCache, MultiTurnChatHitsEverythingBeforeTheNewTurn) {
  const DeepseekV4& model = golden_model("small-real");
  const int64_t vocab = model.config().vocab_size;
  Server s = server(model);
  const std::vector<int32_t> turn1 = tokens(200, 6, vocab);
  const Served reply1 = s.run(turn1, greedy(90));
  std::vector<int32_t> turn2 = concat(concat(turn1, reply1.tokens), tokens(30, 7, vocab));
  const Served reply2 = s.run(turn2, greedy(10));
  // Turn 1 computed 200 + 89 positions: blocks [0, 256).
  EXPECT_EQ(reply2.cached, 256);
  const std::vector<int32_t> turn3 = concat(concat(turn2, reply2.tokens), tokens(20, 8, vocab));
  const Served reply3 = s.run(turn3, greedy(4));
  EXPECT_EQ(reply3.cached, static_cast<int64_t>((turn2.size() + reply2.tokens.size() - 1) / 128 * 128));
  // Against a cold run of the last turn (turn 1's reply rows were decode
  // rows there: equal within rounding, same tokens).
  const Served cold = server(model).run(turn3, greedy(4));
  EXPECT_EQ(reply3.tokens, cold.tokens);
}

TEST(PrefixCache, PagePressureEvictsBlocksAndLosesNothing) {
  const DeepseekV4& model = golden_model("small-real");
  const int64_t vocab = model.config().vocab_size;
  // A cache with room for about two requests' history.
  EngineOptions o = options();
  auto budget = KvCacheManager::budget_for(CacheGeometry::of(model.config()), [&] {
    KvCacheOptions c = o.cache;
    c.max_num_seqs = o.scheduler.max_num_seqs;
    c.max_num_batched_tokens = o.scheduler.max_num_batched_tokens;
    return c;
  }(), 12);
  ASSERT_TRUE(budget.ok());
  o.cache.memory_bytes = *budget;
  Server s = server(model, o);
  std::vector<Served> first;
  for (int i = 0; i < 6; ++i) first.push_back(s.run(tokens(300, 10 + i, vocab), greedy(4)));
  // The oldest prompts were evicted (cold again), the newest is still there.
  const Served newest = s.run(tokens(300, 15, vocab), greedy(4));
  EXPECT_EQ(newest.cached, 256);
  EXPECT_EQ(newest.tokens, first[5].tokens);
  // The oldest lost its blocks, leaves first, and is computed again.
  const Served oldest = s.run(tokens(300, 10, vocab), greedy(4));
  EXPECT_LT(oldest.cached, 256);
  EXPECT_EQ(oldest.tokens, first[0].tokens);
  EXPECT_LE(s.engine().cache().prefix_cache()->num_blocks(), 12);
  EXPECT_EQ(s.engine().cache().pages_in_use(), 0);
}

TEST(PrefixCache, DataParallelPartitionWithTheLongestHitServesIt) {
  const std::string dir = golden_dir() + "/small-real";
  const DeepseekV4& model = golden_model("small-real");
  const int64_t vocab = model.config().vocab_size;
  ParallelOptions p;
  p.topology.dp = 2;
  EngineOptions o = options();
  auto cache = Engine::cache_options(model.config(), o);
  ASSERT_TRUE(cache.ok());
  auto executor = LocalExecutor::create(dir, {}, p, *cache);
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  auto engine = Engine::create(std::move(*executor), o.scheduler);
  ASSERT_TRUE(engine.ok());
  Server s(std::move(*engine));
  const std::vector<int32_t> prefix = tokens(384, 20, vocab);
  // Another request keeps group 0 busy, so the prefix goes to group 1.
  ASSERT_TRUE(s.engine().add_request(tokens(50, 23, vocab), greedy(2)).ok());
  ASSERT_TRUE(s.engine().add_request(concat(prefix, tokens(30, 21, vocab)), greedy(2)).ok());
  s.drain();
  ASSERT_EQ(s.engine().stats().requests_per_group, (std::vector<int64_t>{1, 1}));
  // Both groups are idle now (the least loaded would be group 0); the one
  // holding the prefix gets the request.
  const std::vector<int32_t> b = concat(prefix, tokens(30, 22, vocab));
  const Served hit = s.run(b, greedy(6));
  EXPECT_EQ(hit.cached, 384);
  EXPECT_EQ(s.engine().stats().requests_per_group, (std::vector<int64_t>{1, 2}));
  const Served cold = server(model).run(b, greedy(6));
  expect_identical(hit, cold, "dp2");
}

TEST(PrefixCache, WorksUnderSpeculativeDecodingAndCanBeTurnedOff) {
  const DeepseekV4& model = golden_model("small-fp8");
  const int64_t vocab = model.config().vocab_size;
  const std::vector<int32_t> prefix = tokens(256, 30, vocab), b = concat(prefix, tokens(50, 31, vocab));
  const Served cold = server(model).run(b, greedy(16));
  EngineOptions spec = options();
  spec.scheduler.num_speculative_tokens = 3;
  Server s = server(model, spec);
  s.run(concat(prefix, tokens(50, 32, vocab)), greedy(7));
  const Served hit = s.run(b, greedy(16));
  EXPECT_EQ(hit.cached, 256);
  expect_identical(hit, cold, "speculative");

  EngineOptions off = options();
  off.cache.enable_prefix_caching = false;
  Server plain = server(model, off);
  plain.run(concat(prefix, tokens(50, 32, vocab)), greedy(7));
  const Served none = plain.run(b, greedy(16));
  EXPECT_EQ(none.cached, 0);
  expect_identical(none, cold, "prefix caching off");
}

}  // namespace
}  // namespace dsv4
