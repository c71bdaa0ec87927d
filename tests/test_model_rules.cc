// The small rules the forward is built from: YaRN frequencies, Sinkhorn,
// top-k tie order, which compressed rows a query sees, and compression that
// does not depend on how tokens are split into chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cache_rows.h"
#include "model/cache_geometry.h"
#include "model/compressor.h"
#include "model/config.h"
#include "model/hyper_connection.h"
#include "model/indexer.h"
#include "model/rope.h"
#include "ops/norm.h"
#include "ops/topk.h"
#include "checkpoint/config_json.h"

namespace dsv4 {
namespace {

const kernels::Kernels& exact_kernels() { return kernels::kernels_for(kernels::Numerics::kExact); }

TEST(Rope, PlainFrequencies) {
  RopeOptions o;
  o.rope_dim = 8;
  o.base = 10000.0f;
  Rope r(o);
  ASSERT_EQ(r.pairs(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(r.inv_freq()[i], 1.0f / std::pow(10000.0f, 2.0f * i / 8));
  float c[4], s[4];
  r.angles(3, c, s);
  EXPECT_NEAR(c[1], std::cos(3.0 * r.inv_freq()[1]), 1e-6);
  EXPECT_NEAR(s[1], std::sin(3.0 * r.inv_freq()[1]), 1e-6);
}

TEST(Rope, YarnBlendsBetweenCorrectionDims) {
  // dim 64, base 160000, factor 16, original 65536, beta 32/1: the correction
  // range is [floor(d(32)), ceil(d(1))] with d(r) = 64 ln(65536 / (2 pi r)) / (2 ln 160000).
  RopeOptions o{64, 160000.0f, 65536, 16.0f, 32.0f, 1.0f};
  Rope yarn(o);
  RopeOptions plain_o{64, 160000.0f, 0, 1.0f, 32.0f, 1.0f};
  Rope plain(plain_o);
  auto d = [](double rot) { return 64 * std::log(65536 / (rot * 2 * M_PI)) / (2 * std::log(160000.0)); };
  const int low = static_cast<int>(std::floor(d(32))), high = static_cast<int>(std::ceil(d(1)));
  for (int i = 0; i < 32; ++i) {
    double ramp = std::clamp((i - low) / double(high - low), 0.0, 1.0);
    double expect = plain.inv_freq()[i] / 16.0 * ramp + plain.inv_freq()[i] * (1 - ramp);
    EXPECT_NEAR(yarn.inv_freq()[i], expect, 1e-6 * plain.inv_freq()[i]) << i;
  }
  EXPECT_FLOAT_EQ(yarn.inv_freq()[0], plain.inv_freq()[0]);            // fast dims untouched
  EXPECT_FLOAT_EQ(yarn.inv_freq()[31], plain.inv_freq()[31] / 16.0f);  // slow dims interpolated
}

TEST(HyperConnection, SinkhornIsNearlyDoublyStochastic) {
  const int hc = 4;
  std::vector<float> m(hc * hc);
  for (int i = 0; i < hc * hc; ++i) m[i] = std::sin(1.7f * i) * 3;
  sinkhorn(m.data(), hc, 20, 1e-6f);
  for (int i = 0; i < hc; ++i) {
    float row = 0, col = 0;
    for (int j = 0; j < hc; ++j) {
      row += m[i * hc + j];
      col += m[j * hc + i];
      EXPECT_GT(m[i * hc + j], 0.0f);
    }
    EXPECT_NEAR(row, 1.0f, 1e-3f);
    EXPECT_NEAR(col, 1.0f, 1e-5f);  // the last step normalizes columns
  }
}

TEST(HyperConnection, SinkhornOneIterationIsSoftmaxThenColumns) {
  const int hc = 2;
  std::vector<float> m = {0.0f, 1.0f, 2.0f, 0.5f};
  sinkhorn(m.data(), hc, 1, 0.0f);
  double a = 1 / (1 + std::exp(1.0)), b = 1 - a;       // row 0 softmax
  double c = 1 / (1 + std::exp(-1.5)), d = 1 - c;      // row 1 softmax
  EXPECT_NEAR(m[0], a / (a + c), 1e-6);
  EXPECT_NEAR(m[1], b / (b + d), 1e-6);
}

TEST(TopK, TiesFollowTorchOrder) {
  // All equal: nth_element/sort over (value, index) pairs; the result is a
  // fixed function of the input, and the top values are always right.
  std::vector<float> v = {0, 3, 0, 5, 0, 0, 1, 0};
  std::vector<int32_t> out(3);
  topk_like_torch(v.data(), v.size(), 3, out.data());
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[1], 1);
  EXPECT_EQ(out[2] == 6, true);
}

// Index key rows (FP4 codes) of dim 32 holding `first` in dim 0, 0 elsewhere.
std::vector<uint8_t> index_rows(const std::vector<float>& first, std::vector<const uint8_t*>* rows) {
  const int64_t bytes = kernels::index_row_bytes(32);
  std::vector<uint8_t> out(first.size() * bytes);
  for (size_t j = 0; j < first.size(); ++j) {
    std::vector<float> x(32, 0.0f);
    x[0] = first[j];
    kernels::store_index_row(x.data(), 32, &out[j * bytes]);
  }
  for (size_t j = 0; j < first.size(); ++j) rows->push_back(&out[j * bytes]);
  return out;
}

TEST(Indexer, QueriesSeeOnlyFinishedRows) {
  IndexerShape s{1, 32, 100, 4};
  const int64_t n = 12;
  std::vector<float> q(n * 32, 1.0f), w(n, 1.0f);
  std::vector<const uint8_t*> rows;
  const std::vector<uint8_t> keys = index_rows({1.0f, 1.0f, 1.0f}, &rows);
  std::vector<std::vector<int32_t>> picked;
  indexer_select(exact_kernels(), s, q.data(), w.data(), rows.data(), 0, n, 0, nullptr, &picked);
  for (int64_t t = 0; t < n; ++t) EXPECT_EQ(static_cast<int64_t>(picked[t].size()), (t + 1) / 4) << t;
}

TEST(Indexer, TopkKeepsTheBestRows) {
  IndexerShape s{1, 32, 2, 4};
  std::vector<float> q(32, 0.0f), w = {1.0f};
  q[0] = 1.0f;
  std::vector<const uint8_t*> rows;
  const std::vector<uint8_t> keys = index_rows({0.1f, 0.9f, -1.0f, 0.5f}, &rows);  // scores .125 1 0 .5 in FP4
  std::vector<std::vector<int32_t>> picked;
  indexer_select(exact_kernels(), s, q.data(), w.data(), rows.data(), 15, 1, 0, nullptr, &picked);
  ASSERT_EQ(picked[0].size(), 2u);
  EXPECT_EQ(picked[0][0], 1);
  EXPECT_EQ(picked[0][1], 3);
}

// A decode step's one query row is scored in blocks of keys, a task each:
// the rows it picks are those of one kernel call over all its keys, for
// every row of a chunk, whether scored together or one at a time.
TEST(Indexer, ScoringInKeyBlocksPicksWhatOneCallOverAllKeysPicks) {
  const int heads = 4, dim = 32;
  IndexerShape s{heads, dim, 40, 4};
  const int64_t start = 4000, n = 3, keys_total = (start + n) / s.ratio;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> firsts(keys_total);
  for (float& f : firsts) f = normal(rng);
  std::vector<const uint8_t*> rows;
  std::vector<uint8_t> keys = index_rows(firsts, &rows);
  const int64_t bytes = kernels::index_row_bytes(dim);
  for (int64_t j = 0; j < keys_total; ++j) {  // every dim random, not only the first
    std::vector<float> x(dim);
    for (float& v : x) v = normal(rng);
    kernels::store_index_row(x.data(), dim, &keys[j * bytes]);
  }
  std::vector<float> q(n * heads * dim), w(n * heads);
  for (float& v : q) v = normal(rng);
  for (float& v : w) v = normal(rng);
  const kernels::Kernels& k = exact_kernels();
  std::vector<std::vector<int32_t>> together;
  indexer_select(k, s, q.data(), w.data(), rows.data(), start, n, 0, nullptr, &together);
  ASSERT_EQ(together.size(), static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t visible = (start + i + 1) / s.ratio;
    std::vector<float> dots(visible * heads), scratch(kernels::head_dots_scratch(heads, dim)), score(visible);
    k.head_dots(&q[i * heads * dim], heads, rows.data(), visible, dim, scratch.data(), dots.data());
    for (int64_t j = 0; j < visible; ++j) {
      float acc = 0.0f;
      for (int h = 0; h < heads; ++h) acc += std::max(dots[j * heads + h], 0.0f) * w[i * heads + h];
      score[j] = acc;
    }
    std::vector<int32_t> expected(s.topk);
    topk_like_torch(score.data(), visible, s.topk, expected.data());
    EXPECT_EQ(together[i], expected) << "row " << i;
    std::vector<std::vector<int32_t>> alone;
    indexer_select(k, s, &q[i * heads * dim], &w[i * heads], rows.data(), start + i, 1, 0, nullptr, &alone);
    EXPECT_EQ(alone[0], expected) << "row " << i << " alone";
  }
}

// Four streams of 1024 (two pieces of the mixes to a copy).
ModelConfig hc_config() {
  ModelConfig c;
  c.dim = 1024;
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  c.hc_eps = 1e-6f;
  c.norm_eps = 1e-6f;
  return c;
}

// Random mixes of the streams of c, packed.
HyperConnWeights random_hc_weights(const ModelConfig& c, std::mt19937& rng) {
  const int64_t flat = int64_t{c.hc_mult} * c.dim, mixes = c.mix_hc();
  std::normal_distribution<float> normal(0.0f, 0.05f);
  HyperConnWeights w;
  w.fn.out = mixes;
  w.fn.in = flat;
  w.fn.w.resize(mixes * flat);
  for (float& v : w.fn.w) v = normal(rng);
  w.fn.pack();
  w.base.assign(mixes, 0.1f);
  w.scale = {0.5f, 0.7f, 0.9f};
  return w;
}

// Fast numerics sum the mixes' projection over the flattened streams in
// pieces (a tile each, so a decode step's one row spreads over the pool):
// a row's mixes are still its own, bit for bit, alone or among others, and
// within float rounding of the exact one-sum mixes.
TEST(HyperConnections, FastMixesInPiecesDependOnTheirRowOnly) {
  const ModelConfig c = hc_config();
  const int64_t flat = int64_t{c.hc_mult} * c.dim, rows = 20, row = 5;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const HyperConnWeights w = random_hc_weights(c, rng);
  std::vector<float> h(rows * flat);
  for (float& v : h) v = normal(rng) * 20.0f;
  auto decode_rows = [](int64_t n) {
    ReferenceRows rr;
    rr.index.assign(n, 0);
    rr.count.assign(n, ReferenceRows::kDecodeRows);
    return rr;
  };
  const kernels::Kernels& fast = kernels::kernels_for(kernels::Numerics::kFast);
  const HcMix batch = hc_mixes(fast, w, c, h.data(), rows, decode_rows(rows));
  const HcMix alone = hc_mixes(fast, w, c, h.data() + row * flat, 1, decode_rows(1));
  const HcMix exact = hc_mixes(exact_kernels(), w, c, h.data() + row * flat, 1, decode_rows(1));
  const int hc = c.hc_mult;
  for (int s = 0; s < hc; ++s) {
    EXPECT_EQ(alone.pre[s], batch.pre[row * hc + s]) << s;
    EXPECT_EQ(alone.post[s], batch.post[row * hc + s]) << s;
    EXPECT_NEAR(alone.pre[s], exact.pre[s], 1e-5f) << s;
    EXPECT_NEAR(alone.post[s], exact.post[s], 1e-5f) << s;
  }
  for (int e = 0; e < hc * hc; ++e) {
    EXPECT_EQ(alone.comb[e], batch.comb[row * hc * hc + e]) << e;
    EXPECT_NEAR(alone.comb[e], exact.comb[e], 1e-5f) << e;
  }
}

// hc_post_pre updates the streams and takes the next sublayer's mixes in
// one job in fast numerics (each tile makes the new values of its piece):
// the streams, mixes and input are those of hc_post then hc_pre, bit for
// bit, in both numerics, for one row and for more than a block of rows.
// And hc_pre's input, collapsed and normed in the mixes' tasks, is the
// collapse by its pre then the norm, each a step of its own.
TEST(HyperConnections, PostThenPreInOnePassGiveTheSameBits) {
  const ModelConfig c = hc_config();
  const int64_t flat = int64_t{c.hc_mult} * c.dim;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const HyperConnWeights attn = random_hc_weights(c, rng), ffn = random_hc_weights(c, rng);
  std::vector<float> attn_norm(c.dim), ffn_norm(c.dim);
  for (float& v : attn_norm) v = 1.0f + normal(rng);
  for (float& v : ffn_norm) v = 1.0f + normal(rng);
  for (const kernels::Kernels* k : {&kernels::kernels_for(kernels::Numerics::kFast), &exact_kernels()}) {
    for (int64_t rows : {1, 3, 40}) {
      SCOPED_TRACE(testing::Message() << "rows " << rows << (k == &exact_kernels() ? " exact" : " fast"));
      ReferenceRows rr;
      rr.index.assign(rows, 0);
      rr.count.assign(rows, ReferenceRows::kDecodeRows);
      std::vector<float> h(rows * flat), y(rows * c.dim), x(rows * c.dim);
      for (float& v : h) v = normal(rng) * 20.0f;
      for (float& v : y) v = normal(rng) * 10.0f;
      const HcMix mix = hc_pre(*k, attn, attn_norm, c, h.data(), rows, rr, x.data());
      std::vector<float> x_steps(rows * c.dim);
      hc_collapse(mix.pre.data(), c, h.data(), rows, x_steps.data());
      rms_norm_rows(attn_norm, c.norm_eps, x_steps.data(), rows, c.dim);
      EXPECT_EQ(x, x_steps);
      // Separately: the update in place, then the next mixes.
      std::vector<float> h_apart = h, x_apart(rows * c.dim);
      hc_post(mix, c, y.data(), rows, h_apart.data(), h_apart.data());
      const HcMix apart = hc_pre(*k, ffn, ffn_norm, c, h_apart.data(), rows, rr, x_apart.data());
      std::vector<float> h_out(rows * flat), x_out(rows * c.dim);
      const HcMix together =
          hc_post_pre(*k, mix, y.data(), ffn, ffn_norm, c, h.data(), rows, rr, h_out.data(), x_out.data());
      EXPECT_EQ(h_out, h_apart);
      EXPECT_EQ(x_out, x_apart);
      EXPECT_EQ(together.pre, apart.pre);
      EXPECT_EQ(together.post, apart.post);
      EXPECT_EQ(together.comb, apart.comb);
    }
  }
}

CompressorWeights make_compressor(int ratio, int d) {
  CompressorWeights w;
  w.ratio = ratio;
  w.head_dim = d;
  w.overlap = ratio == 4;
  const int width = (w.overlap ? 2 : 1) * d;
  w.ape.resize(ratio * width);
  for (size_t i = 0; i < w.ape.size(); ++i) w.ape[i] = std::cos(0.3f * i);
  w.norm.assign(d, 1.0f);
  return w;
}

// A compressor state and the rows it has written.
// A compressor state and the rows (KV rows as the cache stores them) it has
// written.
struct CompressorRun {
  CompressorRun(const CompressorWeights& w, int rope_dim)
      : w(w),
        format{w.head_dim - rope_dim, rope_dim},
        floats(CacheGeometry().compressor_state_floats(w.ratio, w.head_dim)),
        kv(floats),
        score(floats) {
    reset_compressor_state(state(), floats);
  }
  CompressorStateView state() { return {kv.data(), score.data(), CacheGeometry().compressor_slots(w.ratio)}; }
  void feed(const Rope& rope, const float* x_kv, const float* x_score, int64_t start, int64_t n) {
    compress_tokens(exact_kernels(), w, rope, static_cast<int>(format.rope), 1e-6f, x_kv, x_score, start, n, state(),
                    0, [&](int64_t j) {
                      if (static_cast<int64_t>(rows.size()) < (j + 1) * format.bytes())
                        rows.resize((j + 1) * format.bytes());
                      return rows.data() + j * format.bytes();
                    });
  }
  const CompressorWeights& w;
  kernels::KvRowFormat format;
  int64_t floats;
  std::vector<float> kv, score;
  std::vector<uint8_t> rows;
};

TEST(Compressor, RowsDoNotDependOnChunking) {
  for (int ratio : {4, 16}) {
    const int d = 128, rd = 64, n = 45;
    CompressorWeights w = make_compressor(ratio, d);
    const int width = (w.overlap ? 2 : 1) * d;
    std::vector<float> kv(n * width), score(n * width);
    for (int i = 0; i < n * width; ++i) {
      kv[i] = std::sin(0.11f * i);
      score[i] = std::cos(0.07f * i);
    }
    Rope rope(RopeOptions{rd, 10000.0f, 0, 1.0f, 32.0f, 1.0f});
    CompressorRun whole(w, rd), pieces(w, rd);
    whole.feed(rope, kv.data(), score.data(), 0, n);
    for (int s = 0; s < n; s += 7)
      pieces.feed(rope, kv.data() + s * width, score.data() + s * width, s, std::min(7, n - s));
    ASSERT_EQ(whole.rows.size(), static_cast<size_t>(n / ratio * whole.format.bytes()));
    EXPECT_EQ(whole.rows, pieces.rows) << "ratio " << ratio;
  }
}

TEST(Compressor, FirstOverlappingWindowIgnoresItsMissingPredecessor) {
  // Ratio 4, one window: pooling is a softmax over the window's own second
  // half dims only (the predecessor slots start at -inf).
  const int d = 128, rd = 64;
  CompressorWeights w = make_compressor(4, d);
  std::fill(w.ape.begin(), w.ape.end(), 0.0f);
  std::vector<float> kv(4 * 2 * d), score(4 * 2 * d, 0.0f);
  for (int t = 0; t < 4; ++t)
    for (int k = 0; k < 2 * d; ++k) kv[t * 2 * d + k] = k < d ? 100.0f : t + 1.0f;
  Rope rope(RopeOptions{rd, 10000.0f, 0, 1.0f, 32.0f, 1.0f});
  CompressorRun run(w, rd);
  run.feed(rope, kv.data(), score.data(), 0, 4);
  ASSERT_EQ(run.rows.size(), static_cast<size_t>(run.format.bytes()));
  std::vector<float> rows(d);
  kernels::load_kv_row(run.rows.data(), run.format, rows.data());
  // Equal scores: mean of 1..4 = 2.5 in every dim, then RMS-normalized to 1
  // (the first half's 100s are not used), RoPE at position 0 is identity.
  for (int k = 0; k < d; ++k) EXPECT_NEAR(rows[k], 1.0f, 1e-5f) << k;
}

TEST(Config, BadConfigsNameTheProblem) {
  const std::string good = R"({"vocab_size": 64, "hidden_size": 128, "moe_intermediate_size": 64, "num_hidden_layers": 2,
    "num_nextn_predict_layers": 1, "num_attention_heads": 2, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "q_lora_rank": 32, "head_dim": 128, "qk_rope_head_dim": 64, "o_groups": 2, "o_lora_rank": 16,
    "sliding_window": 8, "compress_ratios": [0, 4, 0], "index_n_heads": 2, "index_head_dim": 128,
    "index_topk": 4, "hc_mult": 2, "max_position_embeddings": 256})";
  ASSERT_TRUE(parse_model_config(good, "c").ok());
  struct Case {
    std::string from, to, expect;
  };
  // One case per rule the forward needs (config.cc says which step of the
  // reference each serves).
  std::vector<Case> cases = {
      {R"("hidden_size": 128,)", "", "missing required field 'hidden_size'"},
      {R"("head_dim": 128)", R"("head_dim": "x")", "'head_dim' must be an integer"},
      {R"("hc_mult": 2,)", R"("hc_mult": 2, "rope_scaling": {"type": 5},)", "wrong JSON type"},
      {R"("hidden_size": 128)", R"("hidden_size": 0)", "must be positive"},
      {R"("num_nextn_predict_layers": 1)", R"("num_nextn_predict_layers": 1, "num_hash_layers": -1)", "must not be negative"},
      {R"("compress_ratios": [0, 4, 0])", R"("compress_ratios": [0, 4])", "compress_ratios has 2 entries"},
      {R"("compress_ratios": [0, 4, 0])", R"("compress_ratios": [0, -4, 0])", "compress_ratios entries"},
      {R"("qk_rope_head_dim": 64)", R"("qk_rope_head_dim": 0)", "qk_rope_head_dim must be even, positive"},
      {R"("qk_rope_head_dim": 64)", R"("qk_rope_head_dim": 63)", "qk_rope_head_dim must be even, positive"},
      {R"("qk_rope_head_dim": 64)", R"("qk_rope_head_dim": 192)", "at most head_dim"},
      {R"("qk_rope_head_dim": 64)", R"("qk_rope_head_dim": 32)", "multiple of 64"},
      {R"("o_groups": 2)", R"("o_groups": 3)", "divisible by o_groups"},
      {R"("q_lora_rank": 32)", R"("q_lora_rank": 0)", "q_lora_rank and o_lora_rank"},
      {R"("sliding_window": 8)", R"("sliding_window": 0)", "sliding_window"},
      {R"("num_experts_per_tok": 2)", R"("num_experts_per_tok": 9)", "num_experts_per_tok"},
      {R"("num_experts_per_tok": 2)", R"("num_experts_per_tok": 2, "n_shared_experts": 2)", "n_shared_experts"},
      {R"("hc_mult": 2)", R"("hc_mult": 0)", "hc_mult must be positive"},
      {R"("hc_mult": 2)", R"("hc_mult": 2, "hc_sinkhorn_iters": -1)", "hc_sinkhorn_iters not negative"},
      {R"("index_head_dim": 128)", R"("index_head_dim": 96)", "power of two"},
      {R"("index_head_dim": 128)", R"("index_head_dim": 16)", "multiple of 32"},
      {R"("index_head_dim": 128)", R"("index_head_dim": 32)", "at least qk_rope_head_dim"},
      {R"("index_n_heads": 2)", R"("index_n_heads": 0)", "index_n_heads must be positive"},
      {R"("index_topk": 4)", R"("index_topk": -1)", "index_topk not negative"},
      {R"("max_position_embeddings": 256)", R"("max_position_embeddings": 0)", "max_position_embeddings"},
      {R"("hc_mult": 2,)", R"("hc_mult": 2, "rope_scaling": {"type": "yarn", "factor": 0, "original_max_position_embeddings": 64},)",
       "rope_scaling factor"},
  };
  for (const auto& c : cases) {
    std::string text = good;
    text.replace(text.find(c.from), c.from.size(), c.to);
    auto r = parse_model_config(text, "cfg.json");
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(parse_model_config("{nope", "c").ok());

  // What the reference runs loads too: an indexer head of only RoPE dims, a
  // longer ratio list (the extra entries unused), ratio 1, hash routing
  // reaching the MTP block, one Sinkhorn normalization, no indexer top-k, a
  // KV head of only RoPE dims.
  const std::vector<Case> accepted = {
      {R"("index_head_dim": 128)", R"("index_head_dim": 64)", ""},
      {R"("compress_ratios": [0, 4, 0])", R"("compress_ratios": [0, 4, 0, 128])", ""},
      {R"("compress_ratios": [0, 4, 0])", R"("compress_ratios": [0, 1, 0])", ""},
      {R"("num_nextn_predict_layers": 1)", R"("num_nextn_predict_layers": 1, "num_hash_layers": 3)", ""},
      {R"("hc_mult": 2)", R"("hc_mult": 2, "hc_sinkhorn_iters": 0)", ""},
      {R"("index_topk": 4)", R"("index_topk": 0)", ""},
      {R"("head_dim": 128, "qk_rope_head_dim": 64)", R"("head_dim": 64, "qk_rope_head_dim": 64)", ""},
  };
  for (const auto& c : accepted) {
    std::string text = good;
    text.replace(text.find(c.from), c.from.size(), c.to);
    auto r = parse_model_config(text, "cfg.json");
    EXPECT_TRUE(r.ok()) << c.to << ": " << r.status().message();
    if (r.ok()) {
      EXPECT_EQ(r->compress_ratios.size(), 3u);
    }
  }
}

}  // namespace
}  // namespace dsv4
