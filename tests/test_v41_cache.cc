// DeepSeek-V4.1's caches: its row formats hold exactly the values its
// reference rounds to, and its cache geometry stores rows only where the
// reference computes them (the KV sources), in the page families V4 uses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "checkpoint/config_json.h"
#include "checkpoint/released_configs.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/v41_loader.h"
#include "golden_v41_case.h"
#include "kernels/cache_rows.h"
#include "kv/kv_cache_manager.h"
#include "kv/page_layout.h"
#include "model/cache_geometry.h"
#include "model/v41_linear.h"
#include "tools/capacity_plan.h"
#include "test_util.h"

namespace dsv4 {
namespace {

// Rows of hard values, and blocks whose largest value rounds onto a power
// of two times the top code (224 in e4m3 at scale 1; its scale then halves).
std::vector<std::vector<float>> rows_of(int64_t dim) {
  const std::vector<float> x = testing::hard_values(60 * dim, 41);
  std::vector<std::vector<float>> rows;
  for (int64_t r = 0; r < 60; ++r) rows.emplace_back(&x[r * dim], &x[(r + 1) * dim]);
  std::vector<float> edge(dim);
  for (int64_t i = 0; i < dim; ++i) edge[i] = i % 8 == 0 ? 225.0f : std::ldexp(static_cast<float>(i % 7), -9);
  rows.push_back(edge);
  for (float& v : edge) v = -v * 0.0234375f;
  rows.push_back(edge);
  return rows;
}

TEST(V41CacheRows, WindowRowsHoldTheFp8RoundedValues) {
  for (int64_t dim : {32, 128, 512}) {
    for (std::vector<float>& want : rows_of(dim)) {
      act_round_e4m3(want.data(), dim);
      std::vector<uint8_t> row(kernels::v41_window_row_bytes(dim));
      std::vector<float> got(dim);
      kernels::store_v41_window_row(want.data(), dim, row.data());
      kernels::load_v41_window_row(row.data(), dim, got.data());
      testing::expect_same_bits(want, got, "window row of " + std::to_string(dim));
    }
  }
}

TEST(V41CacheRows, CompressedRowsHoldTheFp4RoundedValues) {
  for (int64_t dim : {32, 128, 512}) {
    for (std::vector<float>& want : rows_of(dim)) {
      fp4_round_e4m3_scaled(want.data(), dim);
      std::vector<uint8_t> row(kernels::v41_compressed_row_bytes(dim));
      std::vector<float> got(dim);
      kernels::store_v41_compressed_row(want.data(), dim, row.data());
      kernels::load_v41_compressed_row(row.data(), dim, got.data());
      testing::expect_same_bits(want, got, "compressed row of " + std::to_string(dim));
    }
  }
}

TEST(V41CacheRows, IndexKeysHoldTheFp4RoundedValues) {
  for (int64_t dim : {32, 128}) {
    for (std::vector<float>& want : rows_of(dim)) {
      fp4_round_e8m0(want.data(), dim);
      std::vector<uint8_t> row(kernels::index_row_bytes(dim));
      std::vector<float> got(dim);
      kernels::store_index_row(want.data(), dim, row.data());
      kernels::load_index_row(row.data(), dim, got.data());
      testing::expect_same_bits(want, got, "index key of " + std::to_string(dim));
    }
  }
}

ModelConfig released_v41() {
  auto c = parse_v41_model_config(released_config_json("v41-flash"), "V4.1-Flash");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : ModelConfig{};
}

TEST(V41CacheGeometry, OnlyTheKvSourcesStoreCompressedRowsAndKeys) {
  const ModelConfig c = released_v41();
  ASSERT_EQ(c.n_layers, 40);
  const CacheGeometry g = CacheGeometry::of(c, /*draft_slack=*/0);
  ASSERT_EQ(g.layers.size(), 43u);  // 40 layers and 3 DSpark stages
  for (int l = 0; l < 43; ++l) {
    const LayerCacheShape& s = g.layers[l];
    const bool source = l == 2 || l == 8 || l == 14 || l == 20;
    EXPECT_EQ(s.compressed, source) << "layer " << l;
    EXPECT_EQ(s.indexer, source) << "layer " << l;
    EXPECT_EQ(s.index_state_floats, 0) << "layer " << l;
    // Ratio-2 sources keep their open group (kv and score, 2 x 512 each).
    EXPECT_EQ(s.state_floats, source && l != 20 ? 2 * 512 : 0) << "layer " << l;
    EXPECT_EQ(s.dspark_ring, l >= 40) << "layer " << l;
  }
  EXPECT_EQ(g.window_row_bytes, 512 + 16);      // e4m3 codes + an e8m0 scale per 32
  EXPECT_EQ(g.compressed_row_bytes, 256 + 32);  // e2m1 codes + an e4m3 scale per 16
  EXPECT_EQ(g.index_row_bytes, 64 + 4);
  EXPECT_EQ(g.prefix_replay_tokens(), 0);       // ratio-2 groups close at every block end
}

TEST(V41CacheGeometry, PagesHoldTheSourcesRowsPer128Tokens) {
  const ModelConfig c = released_v41();
  auto layout = PageLayout::of(CacheGeometry::of(c, 0), 64);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  // Three ratio-2 sources (64 rows a page) and one ratio-1 source (128).
  EXPECT_EQ(layout->family(CacheFamily::kCmpC128).page_bytes, 3 * 64 * 288 + 128 * 288);
  EXPECT_EQ(layout->family(CacheFamily::kIdx).page_bytes, 3 * 64 * 68 + 128 * 68);
  EXPECT_EQ(layout->family(CacheFamily::kHcaState).page_bytes, 3 * 2 * 4 * 1024);
  EXPECT_EQ(layout->family(CacheFamily::kOri).page_bytes, 40 * 64 * 528);
  EXPECT_EQ(layout->family(CacheFamily::kDSparkRing).page_bytes, 3 * 64 * 528);
  for (CacheFamily f : {CacheFamily::kCmpC4, CacheFamily::kCsaState, CacheFamily::kCsaInnerState})
    EXPECT_EQ(layout->family(f).page_bytes, 0) << family_name(f);
  // Past the window only the compressed rows and keys grow: (92160 +
  // 21760) bytes per 128 tokens.
  auto total = [&](int64_t len) { return kv_bytes_per_token(*layout, len) * static_cast<double>(len); };
  EXPECT_DOUBLE_EQ((total(int64_t{1} << 21) - total(int64_t{1} << 20)) / (1 << 20), 890.0);
}

TEST(V41CacheGeometry, V4KeepsItsGeometry) {
  auto c = released_config("flash");
  ASSERT_TRUE(c.ok());
  const CacheGeometry g = CacheGeometry::of(*c, 0);
  EXPECT_EQ(g.window_row_bytes, g.kv_row.bytes());
  EXPECT_EQ(g.compressed_row_bytes, g.kv_row.bytes());
  for (size_t l = 0; l < g.layers.size(); ++l) {
    EXPECT_EQ(g.layers[l].compressed, g.layers[l].ratio > 0);
    EXPECT_EQ(g.layers[l].indexer, g.layers[l].ratio == 4);
  }
  EXPECT_EQ(g.prefix_replay_tokens(), 4);
}

// dsv4 plan's V4.1 walk is what the loader holds: on the FP8 golden
// checkpoint, every byte of the rank's weights and of the Engram tables.
TEST(V41Plan, CountsWhatTheLoaderHolds) {
  const std::string dir = golden_v41_dir("v41-fp8");
  auto config = load_any_model_config(dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status().message();
  auto weights = load_v41_weights(dir, *config);
  ASSERT_TRUE(weights.ok()) << weights.status().message();
  PlanOptions o;
  o.max_model_len = 128;
  o.kv_cache_bytes = int64_t{64} << 20;
  auto plan = plan_capacity(*config, o);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->rank_weight_bytes, (*weights)->resident_bytes());
  EXPECT_EQ(plan->engram_bytes, (*weights)->engram_bytes());
  EXPECT_GT(plan->engram_bytes, 0);
  // The tables are read in place, from the files' mapping, not copied.
  for (int layer : config->engram.layer_ids) {
    const V41Engram& e = *(*weights)->blocks[layer].engram;
    const std::string p = "layers." + std::to_string(layer) + ".engram.embed.";
    EXPECT_EQ(e.codes, (*weights)->files->find(p + "weight")->data);
    EXPECT_EQ(e.scales, (*weights)->files->find(p + "scale")->data);
  }
  EXPECT_NE(plan->report().find("Engram tables:"), std::string::npos) << plan->report();
  // On expert-parallel ranks, what each rank's share of the experts holds,
  // and on tensor-parallel ones its share of the rest too (at TP4 the FP8
  // shared expert's 32 features stay whole: a rank's 8 would split a tile).
  // In fast numerics, what the packed linears hold (an FP8 tile's scale
  // once per row, panels padded to 16 rows), on one rank and on shares.
  for (const auto& [tp, dp] : {std::pair{1, 2}, std::pair{1, 4}, std::pair{2, 1}, std::pair{2, 2}, std::pair{4, 1}})
    for (kernels::Numerics numerics : {kernels::Numerics::kExact, kernels::Numerics::kFast}) {
      const int ranks = tp * dp;
      o.topology.tp = tp;
      o.topology.dp = dp;
      o.numerics = numerics;
      o.kv_cache_bytes = (int64_t{64} << 20) * ranks;  // each rank its own 64 MiB
      auto sharded = plan_capacity(*config, o);
      ASSERT_TRUE(sharded.ok()) << sharded.status().message();
      for (int r = 0; r < ranks; ++r) {
        auto share =
            load_v41_weights(dir, *config, {}, RankShards{ExpertShard{r, ranks}, TensorShard{r % tp, tp}}, numerics);
        ASSERT_TRUE(share.ok()) << share.status().message();
        EXPECT_EQ(sharded->rank_weight_bytes, (*share)->resident_bytes())
            << "TP" << tp << " DP" << dp << " rank " << r << " " << kernels::numerics_name(numerics);
      }
    }
  o.topology = {};
  auto fast = plan_capacity(*config, o);
  ASSERT_TRUE(fast.ok()) << fast.status().message();
  auto packed = load_v41_weights(dir, *config, {}, {}, kernels::Numerics::kFast);
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  EXPECT_EQ(fast->rank_weight_bytes, (*packed)->resident_bytes());
  EXPECT_GT(fast->rank_weight_bytes, plan->rank_weight_bytes) << "the scales repeat per row";
}

TEST(V41Plan, TheReleasedConfigPlansWithItsEngramTables) {
  auto run = testing::run_dsv4("plan --config v41-flash --memory 768G --bandwidth 400G");
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("Engram tables: 188.83 GiB once per machine"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("FP4 experts: 275.67 GiB"), std::string::npos) << run.output;
  // 384 GiB holds the experts but not the experts and the tables.
  auto small = testing::run_dsv4("plan --config v41-flash --memory 384G");
  EXPECT_EQ(small.code, 1) << small.output;
  EXPECT_NE(small.output.find("DOES NOT FIT"), std::string::npos) << small.output;
}

}  // namespace
}  // namespace dsv4
