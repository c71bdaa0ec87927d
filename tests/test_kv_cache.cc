// The paged cache: page geometry and sizing, bytes per token against the
// formula of docs/kv-cache.md, and isolation: no request's pages are ever
// written by another request's work, and page accounting returns to its
// baseline.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "kv/kv_cache_manager.h"
#include "runtime/engine.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using testing::greedy;
using testing::golden_model;

int64_t align8(int64_t bytes) { return (bytes + 7) / 8 * 8; }

// The formula of docs/kv-cache.md, from the config alone: rows as FP8/FP4
// codes, states as float32 rings with `slack` draft slots.
double bytes_per_token_formula(const ModelConfig& c, int64_t L, int64_t block, int64_t slack) {
  const int64_t hd = c.head_dim, rd = c.rope_head_dim, ihd = c.index_head_dim, w = c.window_size;
  // FP8 codes, a scale per 64 of them, padded to 4 bytes, then the RoPE dims.
  const int64_t kv_row = (((hd - rd) + (hd - rd) / 64 + 3) / 4 * 4) + 4 * rd;
  const int64_t idx_row = ihd / 2 + ihd / 32;
  const int64_t layers = c.n_layers + c.n_mtp_layers;
  const int64_t ori_pages = (L - 1) / block - std::max<int64_t>(0, L - w + 1) / block + 1;
  const int64_t cmp_pages = (L + 127) / 128;
  double bytes = static_cast<double>(ori_pages) * layers * align8(block * kv_row);
  for (int l = 0; l < layers; ++l) {
    const int r = c.compress_ratios[l];
    if (r == 4) {
      bytes += cmp_pages * static_cast<double>(align8(32 * kv_row) + align8(32 * idx_row));  // cmp_c4 + idx rows
      bytes += 4.0 * 2 * (8 + slack) * 2 * (hd + ihd);  // csa_state + csa_inner_state: [kv, score] rings
    } else if (r > 0) {
      bytes += cmp_pages * static_cast<double>(align8(128 / r * kv_row));  // cmp_c128 rows
      bytes += 4.0 * 2 * (r + slack) * hd;                                 // hca_state
    }
  }
  return bytes / L;
}

// Before cache rows were stored as codes: float32 rows, and compressor tails
// of 4 positions per 128-token block.
double float32_bytes_per_token(const ModelConfig& c, int64_t L, int64_t block) {
  const int64_t hd = c.head_dim, ihd = c.index_head_dim, w = c.window_size;
  const int64_t layers = c.n_layers + c.n_mtp_layers;
  const int64_t ori_pages = (L - 1) / block - std::max<int64_t>(0, L - w + 1) / block + 1;
  const int64_t cmp_pages = (L + 127) / 128;
  double floats = static_cast<double>(ori_pages) * block * hd * layers;
  for (int l = 0; l < layers; ++l) {
    const int r = c.compress_ratios[l];
    if (r == 4) floats += cmp_pages * (32.0 + 8) * (hd + ihd) + 2.0 * (16 * 2 * hd) + 2.0 * (16 * 2 * ihd);
    else if (r > 0) floats += cmp_pages * (128.0 / r) * hd + 2.0 * (r + 8) * hd;
  }
  return 4.0 * floats / L;
}

TEST(KvCache, BytesPerTokenAt4kMatchesTheFormula) {
  for (const char* name : {"tiny-a", "small-real"}) {
    const ModelConfig& c = golden_model(name).config();
    for (int64_t block : {16, 32})
      for (int slack : {0, 3}) {
        KvCacheOptions o;
        o.block_size = block;
        o.max_num_seqs = 2;
        o.memory_bytes = int64_t{64} << 20;
        auto kv = KvCacheManager::create(CacheGeometry::of(c, slack), o);
        ASSERT_TRUE(kv.ok()) << kv.status().message();
        EXPECT_DOUBLE_EQ((*kv)->bytes_per_token(4096), bytes_per_token_formula(c, 4096, block, slack)) << name;
        EXPECT_NE((*kv)->summary().find(std::to_string(static_cast<int64_t>((*kv)->bytes_per_token(4096))) +
                                        " bytes/token at 4K"),
                  std::string::npos)
            << (*kv)->summary();
      }
  }
}

// Rows stored as the codes the reference rounds them to take at most 0.36x
// the float32 cache at 4K context (issue 15's target), and the compressed
// history a GiB holds grows accordingly.
TEST(KvCache, CodedRowsTakeAThirdOfTheFloat32Cache) {
  const ModelConfig& c = golden_model("small-real").config();
  KvCacheOptions o;
  o.max_num_seqs = 2;
  o.memory_bytes = int64_t{64} << 20;
  auto kv = KvCacheManager::create(CacheGeometry::of(c), o);
  ASSERT_TRUE(kv.ok()) << kv.status().message();
  const double now = (*kv)->bytes_per_token(4096), before = float32_bytes_per_token(c, 4096, 32);
  EXPECT_LE(now / before, 0.36) << now << " vs " << before << " bytes/token";
  // Per token of history (compressed rows only): (712 + 68) / 4 bytes per
  // ratio-4 layer and 712 / 128 per ratio-128 layer, against float32 rows
  // and their compressor tails.
  auto layout = PageLayout::of(CacheGeometry::of(c), 32);
  ASSERT_TRUE(layout.ok());
  const double history = static_cast<double>(layout->family(CacheFamily::kCmpC4).page_bytes +
                                             layout->family(CacheFamily::kIdx).page_bytes +
                                             layout->family(CacheFamily::kCmpC128).page_bytes) / kBlockTokens;
  EXPECT_NEAR(history, 2 * (712.0 + 68.0) / 4 + 2 * 712.0 / 128, 1.0);
  const double history_before = 2 * (512 * 4 * (32.0 + 8) + 128 * 4 * (32.0 + 8)) / 128 + 2 * 512 * 4.0 / 128;
  EXPECT_GE(history_before / history, 3.0);
}

TEST(KvCache, EverySeriesHasItsFamilyAndRatiosMustDivideThePage) {
  const ModelConfig& c = golden_model("tiny-a").config();  // ratios 0, 0, 4, 16 + MTP 0
  auto layout = PageLayout::of(CacheGeometry::of(c), 32);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->family(CacheFamily::kCmpC4).rows_per_page[2], 32);
  EXPECT_EQ(layout->family(CacheFamily::kCmpC128).rows_per_page[3], 8);
  EXPECT_EQ(layout->family(CacheFamily::kCmpC128).layer_offset[2], -1);
  EXPECT_EQ(layout->family(CacheFamily::kOri).page_bytes, align8(32 * CacheGeometry::of(c).kv_row.bytes()) * 5);
  CacheGeometry g = CacheGeometry::of(c);
  g.layers[3].ratio = 48;
  auto bad = PageLayout::of(g, 32);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("compress ratio 48"), std::string::npos) << bad.status().message();
}

TEST(KvCache, TooSmallABudgetIsAClearErrorAndTooLargeOneRetriesSmaller) {
  const CacheGeometry g = CacheGeometry::of(golden_model("small-real").config());
  KvCacheOptions o;
  o.max_num_seqs = 4;
  o.memory_bytes = 1 << 20;
  auto small = KvCacheManager::create(g, o);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("too small"), std::string::npos) << small.status().message();
  // More than the machine can map: the manager halves until it fits, and says so.
  o.memory_bytes = int64_t{1} << 52;
  ::testing::internal::CaptureStderr();
  auto big = KvCacheManager::create(g, o);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(big.ok()) << big.status().message();
  EXPECT_LT((*big)->bytes(), o.memory_bytes);
  EXPECT_NE(log.find("retrying with"), std::string::npos) << log;
}

// Each page's bytes, by (family, page id), for one request.
using PageDigest = std::map<std::pair<int, int32_t>, std::string>;

PageDigest digest(KvCacheManager& kv, const BlockTable& t) {
  PageDigest d;
  for (int f = 0; f < kNumCacheFamilies; ++f) {
    PagePool& pool = kv.pool(static_cast<CacheFamily>(f));
    for (int32_t id : t.pages[f]) {
      if (id < 0) continue;
      const char* p = reinterpret_cast<const char*>(kv.store().page(static_cast<CacheFamily>(f), id));
      d[{f, id}] = std::string(p, p + pool.page_bytes());
    }
  }
  return d;
}

// Drives an engine step by step, checking before and after every step that
// requests own disjoint pages and that a request the step did not run has
// exactly the pages and bytes it had.
class IsolationChecker {
 public:
  explicit IsolationChecker(Engine* e) : e_(e) {}

  void add(int64_t id) { live_.insert(id); }
  void drop(int64_t id) { live_.erase(id); }

  std::vector<RequestOutput> step() {
    std::map<int64_t, PageDigest> before;
    std::set<std::pair<int, int32_t>> owned;
    for (int64_t id : live_) {
      const Request* r = e_->scheduler().find(id);
      if (!r) continue;
      before[id] = digest(e_->cache(), r->pages);
      for (const auto& [key, bytes] : before[id]) EXPECT_TRUE(owned.insert(key).second) << "a page with two owners";
    }
    std::vector<RequestOutput> out = e_->step();
    const std::set<int64_t> ran(e_->last_step_requests().begin(), e_->last_step_requests().end());
    for (const auto& [id, pages] : before) {
      const Request* r = e_->scheduler().find(id);
      if (!r || ran.count(id)) continue;
      EXPECT_TRUE(digest(e_->cache(), r->pages) == pages) << "request " << id << " sat out a step and its pages changed";
      ++checked_;
    }
    for (const RequestOutput& o : out)
      if (o.finished) live_.erase(o.id);
    return out;
  }
  int64_t checked() const { return checked_; }

 private:
  Engine* e_;
  std::set<int64_t> live_;
  int64_t checked_ = 0;
};

std::vector<int32_t> tokens(int64_t n, int seed, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 131 + seed * 7 + 3) % vocab);
  return t;
}

EngineOptions tight_options() {
  EngineOptions o;
  o.scheduler.max_num_seqs = 4;
  o.scheduler.max_num_batched_tokens = 5;  // fewer than the running requests want: some sit out
  o.scheduler.long_prefill_token_threshold = 4;
  o.cache.memory_bytes = int64_t{64} << 20;
  return o;
}

// Logits of request `prompt` served alone, for comparison.
std::vector<std::vector<float>> alone(const DeepseekV4& model, const std::vector<int32_t>& prompt, int64_t n) {
  auto e = Engine::create(&model, tight_options());
  std::vector<std::vector<float>> logits;
  (*e)->set_logits_observer([&](int64_t, int64_t, const float* l) {
    logits.emplace_back(l, l + model.config().vocab_size);
  });
  EXPECT_TRUE((*e)->add_request(prompt, greedy(n)).ok());
  while ((*e)->has_unfinished()) (*e)->step();
  return logits;
}

// An engine on tiny-a with a tight token budget, and its empty-cache page count.
class KvCacheIsolation : public ::testing::Test {
 protected:
  void SetUp() override {
    auto created = Engine::create(&model, tight_options());
    ASSERT_TRUE(created.ok()) << created.status().message();
    engine = std::move(*created);
    baseline = engine->cache().pages_in_use();
  }
  const DeepseekV4& model = golden_model("tiny-a");
  const int64_t V = model.config().vocab_size;
  std::unique_ptr<Engine> engine;
  int64_t baseline = 0;
};

TEST_F(KvCacheIsolation, DecodingWhileAnotherPrefillsTouchesOnlyOwnPages) {
  Engine& e = *engine;
  std::map<int64_t, std::vector<std::vector<float>>> logits;
  e.set_logits_observer([&](int64_t id, int64_t, const float* l) { logits[id].emplace_back(l, l + V); });
  IsolationChecker check(&e);
  const auto a_prompt = tokens(12, 1, V), b_prompt = tokens(70, 2, V);
  auto a = e.add_request(a_prompt, greedy(40));
  ASSERT_TRUE(a.ok());
  check.add(*a);
  int64_t b = -1;
  for (int step = 0; e.has_unfinished(); ++step) {
    if (step == 4) {  // A decodes while B's 70-token prompt prefills 4 tokens a step
      auto id = e.add_request(b_prompt, greedy(6));
      ASSERT_TRUE(id.ok());
      check.add(b = *id);
    }
    if (step == 6) {  // C gets pages but little budget: it sits out steps
      auto id = e.add_request(tokens(9, 3, V), greedy(20));
      ASSERT_TRUE(id.ok());
      check.add(*id);
    }
    check.step();
  }
  EXPECT_GT(check.checked(), 0);
  EXPECT_EQ(e.cache().pages_in_use(), baseline);
  // Neither disturbed the other: each computes what it computes alone.
  for (auto [id, prompt, n] : {std::tuple{*a, a_prompt, 40}, std::tuple{b, b_prompt, 6}}) {
    const auto ref = alone(model, prompt, n);
    ASSERT_EQ(logits[id].size(), ref.size());
    for (size_t k = 0; k < ref.size(); ++k)
      EXPECT_TRUE(logits[id][k] == ref[k]) << "request " << id << " step " << k << ": rel L2 "
                                           << testing::rel_l2(logits[id][k].data(), ref[k].data(), V);
  }
}

TEST_F(KvCacheIsolation, FinishedAndAbortedRequestsHandTheirPagesToNewOnes) {
  Engine& e = *engine;
  IsolationChecker check(&e);
  std::vector<int64_t> ids, newcomers;
  auto add = [&](int64_t len, int seed, int64_t max_tokens) {
    auto id = e.add_request(tokens(len, seed, V), greedy(max_tokens));
    EXPECT_TRUE(id.ok());
    check.add(*id);
    ids.push_back(*id);
    return *id;
  };
  const int64_t short_one = add(8, 1, 3);        // finishes early
  const int64_t mid_prefill = add(60, 2, 10);    // aborted while prefilling
  const int64_t mid_decode = add(10, 3, 50);     // aborted while decoding
  add(20, 4, 12);
  std::set<std::pair<int, int32_t>> freed;  // pages the ended requests held
  std::set<std::pair<int, int32_t>> taken;  // pages the newcomers got
  auto remember = [&](int64_t id) {
    if (const Request* r = e.scheduler().find(id))
      for (const auto& [key, bytes] : digest(e.cache(), r->pages)) freed.insert(key);
  };
  for (int step = 0; e.has_unfinished() || step < 30; ++step) {
    if (step == 3) {
      remember(mid_prefill);
      const int64_t before = e.cache().pages_in_use();
      ASSERT_TRUE(e.finish(mid_prefill));
      check.drop(mid_prefill);
      EXPECT_LT(e.cache().pages_in_use(), before);
    }
    if (step == 14) {
      remember(mid_decode);
      ASSERT_TRUE(e.finish(mid_decode));
      check.drop(mid_decode);
      EXPECT_FALSE(e.finish(mid_decode)) << "a second abort of the same request";
    }
    if (step == 15 || step == 17) newcomers.push_back(add(30 + step, step, 8));  // they take the freed pages
    if (step == 2) remember(short_one);
    check.step();
    for (int64_t id : newcomers)
      if (const Request* r = e.scheduler().find(id))
        for (const auto& [key, bytes] : digest(e.cache(), r->pages)) taken.insert(key);
  }
  EXPECT_GT(check.checked(), 0);
  EXPECT_EQ(e.cache().pages_in_use(), baseline);
  int reused = 0;
  for (const auto& key : taken) reused += freed.count(key);
  EXPECT_GT(reused, 0) << "the new requests did not reuse any page the ended ones had";
}

}  // namespace
}  // namespace dsv4
