// The engine over TP x DP ranks (threads): requests spread over the
// data-parallel cache partitions, a paused request keeps its pages bit for
// bit while another group prefills, and every token and logit equals the
// single-rank engine's.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dist/local_communicator.h"
#include "runtime/distributed_executor.h"
#include "runtime/engine.h"
#include "runtime/local_executor.h"
#include "test_util.h"

namespace dsv4 {
namespace {

constexpr const char* kCase = "small-real";

EngineOptions small_engine() {
  EngineOptions o;
  o.scheduler.max_num_seqs = 8;
  o.scheduler.max_num_batched_tokens = 16;  // long prompts prefill over several steps
  o.cache.memory_bytes = int64_t{256} << 20;
  return o;
}

std::unique_ptr<Engine> parallel_engine(int tp, int dp, const EngineOptions& options, bool flashcomm = false) {
  ParallelOptions p;
  p.topology = {tp, dp, 0};
  p.flashcomm = {flashcomm, 4};
  auto cache = Engine::cache_options(testing::golden_model(kCase).config(), options);
  EXPECT_TRUE(cache.ok());
  auto exec = LocalExecutor::create(testing::golden_dir() + "/" + kCase, {}, p, *cache);
  EXPECT_TRUE(exec.ok()) << exec.status().message();
  auto engine = Engine::create(std::move(*exec), options.scheduler);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return std::move(*engine);
}

std::vector<int32_t> prompt(int seed, int len) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(len);
  for (auto& t : p) t = static_cast<int32_t>(rng() % testing::golden_model(kCase).config().vocab_size);
  return p;
}

// Logits by (request, position), for bitwise comparison.
using LogitsLog = std::map<std::pair<int64_t, int64_t>, std::vector<float>>;

void record_logits(Engine* e, LogitsLog* log) {
  const int64_t vocab = e->config().vocab_size;
  e->set_logits_observer([log, vocab](int64_t id, int64_t pos, const float* l) {
    (*log)[{id, pos}] = std::vector<float>(l, l + vocab);
  });
}

// Runs every request to the end; tokens by request id.
std::map<int64_t, std::vector<int32_t>> drain(Engine* e) {
  std::map<int64_t, std::vector<int32_t>> out;
  while (e->has_unfinished())
    for (const RequestOutput& o : e->step()) out[o.id].insert(out[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
  return out;
}

// The single-rank engine's tokens and logits for the same requests, added
// in the same order (so with the same ids).
struct Reference {
  std::map<int64_t, std::vector<int32_t>> tokens;
  LogitsLog logits;
};

Reference single_rank(const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) {
  auto e = Engine::create(&testing::golden_model(kCase), small_engine());
  EXPECT_TRUE(e.ok());
  Reference ref;
  record_logits(e->get(), &ref.logits);
  for (const auto& p : prompts) EXPECT_TRUE((*e)->add_request(p, testing::greedy(max_tokens)).ok());
  ref.tokens = drain(e->get());
  return ref;
}

TEST(ParallelEngine, Tp2Dp2SpreadsRequestsAndMatchesOneRankBitForBit) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back(prompt(i, 9 + 7 * i));
  const Reference ref = single_rank(prompts, 6);
  for (bool observe : {true, false}) {  // full logits; greedy on the vocabulary slices
    auto e = parallel_engine(2, 2, small_engine());
    LogitsLog logits;
    if (observe) record_logits(e.get(), &logits);
    std::vector<int> per_group(2, 0);
    for (const auto& p : prompts) {
      auto id = e->add_request(p, testing::greedy(6));
      ASSERT_TRUE(id.ok());
      per_group[e->scheduler().find(*id)->partition]++;
    }
    EXPECT_EQ(per_group, (std::vector<int>{3, 2})) << "requests are balanced over the groups";
    EXPECT_EQ(drain(e.get()), ref.tokens);
    if (observe) {
      EXPECT_EQ(logits.size(), ref.logits.size());
      for (const auto& [key, l] : logits) EXPECT_EQ(l, ref.logits.at(key)) << "request " << key.first << " position " << key.second;
    }
    for (int g = 0; g < 2; ++g) EXPECT_EQ(e->cache(g).pages_in_use(), 0);
  }
}

TEST(ParallelEngine, FlashComm1PrefillMatchesOneRank) {
  std::vector<std::vector<int32_t>> prompts = {prompt(7, 23), prompt(8, 30), prompt(9, 5)};
  const Reference ref = single_rank(prompts, 5);
  auto e = parallel_engine(2, 1, small_engine(), /*flashcomm=*/true);
  LogitsLog logits;
  record_logits(e.get(), &logits);
  for (const auto& p : prompts) ASSERT_TRUE(e->add_request(p, testing::greedy(5)).ok());
  EXPECT_EQ(drain(e.get()), ref.tokens);
  EXPECT_EQ(logits.size(), ref.logits.size()) << "a logits row for every one the single rank computed";
  EXPECT_EQ(logits.size(), 3u * 5u) << "five tokens chosen for each of three requests";
  for (const auto& [key, l] : logits) EXPECT_EQ(l, ref.logits.at(key)) << "request " << key.first << " position " << key.second;
  auto& exec = static_cast<LocalExecutor&>(e->executor());
  EXPECT_GT(exec.model(0).flashcomm_forwards(), 0) << "prefill steps of >= 4 tokens ran sequence-parallel";
}

// Every page a request holds, in every rank's copy of its group's pages
// (whole pages: the rows not written yet too).
std::vector<std::string> page_bytes(Engine* e, const Request& r) {
  std::vector<std::string> out;
  KvCacheManager& kv = e->cache(r.partition);
  for (int copy = 0; copy < kv.copies(); ++copy)
    for (int f = 0; f < kNumCacheFamilies; ++f)
      for (int32_t id : r.pages.pages[f]) {
        if (id < 0) continue;
        const char* p = reinterpret_cast<const char*>(kv.store(copy).page(static_cast<CacheFamily>(f), id));
        out.emplace_back(p, p + kv.pool(static_cast<CacheFamily>(f)).page_bytes());
      }
  return out;
}

TEST(ParallelEngine, APausedRequestKeepsItsPagesWhileTheOtherGroupPrefills) {
  const std::vector<int32_t> held = prompt(21, 37), incoming = prompt(22, 70);
  const Reference ref = single_rank({held, incoming}, 8);

  auto e = parallel_engine(2, 2, small_engine());
  auto a = e->add_request(held, testing::greedy(8));
  ASSERT_TRUE(a.ok());
  std::map<int64_t, std::vector<int32_t>> tokens;
  auto step = [&] {
    for (const RequestOutput& o : e->step()) tokens[o.id].insert(tokens[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
  };
  while (tokens[*a].size() < 3) step();
  ASSERT_TRUE(e->pause(*a));
  const Request* ra = e->scheduler().find(*a);
  const std::vector<std::string> before = page_bytes(e.get(), *ra);
  ASSERT_FALSE(before.empty());

  auto b = e->add_request(incoming, testing::greedy(8));
  ASSERT_TRUE(b.ok());
  EXPECT_NE(e->scheduler().find(*b)->partition, ra->partition) << "the new request goes to the idle group";
  int prefill_steps = 0;
  while (e->scheduler().find(*b)->num_computed < static_cast<int64_t>(incoming.size())) {
    step();
    ++prefill_steps;
    for (int64_t id : e->last_step_requests()) EXPECT_NE(id, *a) << "a paused request takes no step";
    EXPECT_TRUE(page_bytes(e.get(), *ra) == before) << "pages changed in prefill step " << prefill_steps;
  }
  EXPECT_GE(prefill_steps, 4) << "the prompt is prefilled in chunks";
  ASSERT_TRUE(e->resume(*a));
  for (auto& [id, t] : drain(e.get())) tokens[id].insert(tokens[id].end(), t.begin(), t.end());
  EXPECT_EQ(tokens[*a], ref.tokens.at(1));
  EXPECT_EQ(tokens[*b], ref.tokens.at(2));
}

// The driver/follower protocol of --dist mpi, over ranks that are threads:
// plans and results cross as bytes, and the answers stay exact.
TEST(ParallelEngine, DistributedExecutorOverACommunicatorMatchesOneRank) {
  std::vector<std::vector<int32_t>> prompts = {prompt(31, 19), prompt(32, 40), prompt(33, 8)};
  const Reference ref = single_rank(prompts, 5);
  auto worlds = LocalCommunicator::create(4);
  DistributedOptions d;
  d.model_dir = testing::golden_dir() + "/" + kCase;
  d.parallel.topology = {2, 2, 0};
  d.cache = *Engine::cache_options(testing::golden_model(kCase).config(), small_engine());
  std::vector<std::thread> followers;
  std::vector<Status> follower_status(4);
  for (int r = 1; r < 4; ++r)
    followers.emplace_back([&, r] { follower_status[r] = follow_steps(worlds[r].get(), d); });
  {
    auto exec = DistributedExecutor::create(worlds[0].get(), d);
    ASSERT_TRUE(exec.ok()) << exec.status().message();
    auto e = Engine::create(std::move(*exec), small_engine().scheduler);
    ASSERT_TRUE(e.ok());
    LogitsLog logits;
    record_logits(e->get(), &logits);
    for (const auto& p : prompts) ASSERT_TRUE((*e)->add_request(p, testing::greedy(5)).ok());
    EXPECT_TRUE((*e)->heartbeat().ok());
    EXPECT_EQ(drain(e->get()), ref.tokens);
    EXPECT_EQ(logits.size(), ref.logits.size());
    for (const auto& [key, l] : logits) EXPECT_EQ(l, ref.logits.at(key));
    EXPECT_TRUE((*e)->healthy());
  }  // the executor tells the followers to stop
  for (auto& t : followers) t.join();
  for (int r = 1; r < 4; ++r) EXPECT_TRUE(follower_status[r].ok()) << follower_status[r].message();
}

}  // namespace
}  // namespace dsv4
