// The generic attention and indexer kernels over coded cache rows (the
// oracle of test_ops.cc) compute sink attention and head dots on the values
// the rows stand for; stored rows stand for exactly what the reference's
// rounding leaves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cache_rows.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "test_util.h"

namespace dsv4 {
namespace {

const kernels::Kernels& oracle() {
  return kernels::kernels_for(kernels::Isa::kGeneric, kernels::Numerics::kExact);
}

struct CodedRows {
  kernels::KvRowFormat format;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // what each row stands for
  std::vector<const uint8_t*> slots;
};

// `slots` KV rows of random values, every 7th slot (from the 4th) masked.
CodedRows random_kv_rows(const kernels::KvRowFormat& f, int64_t slots, std::mt19937* rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  CodedRows c{f, std::vector<uint8_t>(slots * f.bytes()), std::vector<float>(slots * f.dim()), {}};
  std::vector<float> x(f.dim());
  for (int64_t j = 0; j < slots; ++j) {
    for (auto& v : x) v = d(*rng) * 3.0f;
    oracle().store_kv_row(x.data(), f, &c.bytes[j * f.bytes()]);
    kernels::load_kv_row(&c.bytes[j * f.bytes()], f, &c.values[j * f.dim()]);
    c.slots.push_back(j % 7 == 3 ? nullptr : &c.bytes[j * f.bytes()]);
  }
  return c;
}

struct Shape {
  int64_t heads, slots, nope, rope;
};
const Shape kShapes[] = {{1, 1, 0, 16}, {5, 13, 64, 16}, {16, 37, 448, 64}, {4, 200, 192, 80}, {16, 8, 64, 0},
                         {3, 9, 128, 2}};

TEST(SinkAttentionHeads, GenericComputesSinkAttentionOnTheRowsValues) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const Shape& s : kShapes) {
    const CodedRows rows = random_kv_rows({s.nope, s.rope}, s.slots, &rng);
    const int64_t dim = rows.format.dim();
    std::vector<float> q(s.heads * dim), sinks(s.heads);
    for (auto& v : q) v = d(rng);
    for (auto& v : sinks) v = d(rng);
    std::vector<float> got(s.heads * dim), scratch(kernels::sink_attention_scratch(s.heads, s.slots, dim));
    const float scale = 0.125f;
    oracle().sink_attention_heads(q.data(), s.heads, rows.slots.data(), s.slots, rows.format, sinks.data(), scale,
                                  scratch.data(), got.data());
    for (int64_t h = 0; h < s.heads; ++h) {
      // In double, in any order: softmax over the unmasked slots and the sink.
      std::vector<double> logit(s.slots);
      double mx = sinks[h];
      for (int64_t j = 0; j < s.slots; ++j) {
        if (!rows.slots[j]) continue;
        double dot = 0;
        for (int64_t k = 0; k < dim; ++k) dot += double(q[h * dim + k]) * rows.values[j * dim + k];
        logit[j] = dot * scale;
        mx = std::max(mx, logit[j]);
      }
      double denom = std::exp(sinks[h] - mx);
      for (int64_t j = 0; j < s.slots; ++j)
        if (rows.slots[j]) denom += std::exp(logit[j] - mx);
      for (int64_t k = 0; k < dim; ++k) {
        double want = 0;
        for (int64_t j = 0; j < s.slots; ++j)
          if (rows.slots[j]) want += std::exp(logit[j] - mx) / denom * rows.values[j * dim + k];
        EXPECT_NEAR(got[h * dim + k], want, 1e-4 * (1 + std::fabs(want))) << "head " << h << " dim " << k;
      }
    }
  }
}

// Random queries [heads, dim] and sinks [heads].
struct HeadInputs {
  std::vector<float> q, sinks;
};
HeadInputs random_heads(int64_t heads, int64_t dim, std::mt19937* rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  HeadInputs in{std::vector<float>(heads * dim), std::vector<float>(heads)};
  for (auto& v : in.q) v = d(*rng);
  for (auto& v : in.sinks) v = d(*rng);
  return in;
}

// fn(kernels, label) for every attention body: each ISA in both numerics.
template <class Fn>
void for_each_body(Fn fn) {
  for (kernels::Isa isa : {kernels::Isa::kGeneric, kernels::Isa::kAvx2, kernels::Isa::kAvx512})
    for (kernels::Numerics n : {kernels::Numerics::kExact, kernels::Numerics::kFast})
      fn(kernels::kernels_for(isa, n),
         std::string(kernels::numerics_name(n)) + " isa " + std::to_string(static_cast<int>(isa)));
}

// The one-call attention of every head over all of `rows`' slots.
std::vector<float> one_call(const kernels::Kernels& k, const HeadInputs& in, const CodedRows& rows) {
  const auto heads = static_cast<int64_t>(in.sinks.size()), slots = static_cast<int64_t>(rows.slots.size());
  const int64_t dim = rows.format.dim();
  std::vector<float> out(heads * dim), scratch(kernels::sink_attention_scratch(heads, slots, dim));
  k.sink_attention_heads(in.q.data(), heads, rows.slots.data(), slots, rows.format, in.sinks.data(), 0.125f,
                         scratch.data(), out.data());
  return out;
}

// Attention takes all of a token's heads in one call when there are many
// tokens (more than a panel of 16: the AVX-512 body decodes each key once
// for every panel) and splits them into smaller groups when there are few
// tokens for many threads: every body (each ISA, both numerics) gives each
// head the same bits whichever group it is computed in.
TEST(SinkAttentionHeads, AHeadsBitsDoNotDependOnItsGroup) {
  std::mt19937 rng(9);
  const CodedRows rows = random_kv_rows({448, 64}, 150, &rng);
  const int64_t heads = 40, dim = rows.format.dim();
  const HeadInputs in = random_heads(heads, dim, &rng);
  for_each_body([&](const kernels::Kernels& k, const std::string& label) {
    const std::vector<float> whole = one_call(k, in, rows);
    std::vector<float> scratch(kernels::sink_attention_scratch(heads, 150, dim));
    for (int64_t group : {1, 2, 4, 8, 16, 32}) {
      std::vector<float> split(heads * dim);
      for (int64_t h0 = 0; h0 < heads; h0 += group)
        k.sink_attention_heads(&in.q[h0 * dim], std::min(group, heads - h0), rows.slots.data(), 150, rows.format,
                               &in.sinks[h0], 0.125f, scratch.data(), &split[h0 * dim]);
      EXPECT_EQ(std::memcmp(whole.data(), split.data(), sizeof(float) * whole.size()), 0)
          << label << " groups of " << group;
    }
  });
}

// Decode on many cores cuts one token's attention along its key slots (the
// scores) and its output dimensions (the weighted sums): every body gives
// the bits of the one-call attention however the cuts fall.
TEST(SinkAttentionHeads, ScoresBySlotBlocksAndSumsByDimensionsGiveTheOneCallsBits) {
  std::mt19937 rng(13);
  for (const kernels::KvRowFormat f : {kernels::KvRowFormat{448, 64}, kernels::KvRowFormat{128, 2}}) {
    const int64_t slots = 150, heads = 20, dim = f.dim();
    const CodedRows rows = random_kv_rows(f, slots, &rng);
    const HeadInputs in = random_heads(heads, dim, &rng);
    for_each_body([&](const kernels::Kernels& k, const std::string& label) {
      const std::vector<float> whole = one_call(k, in, rows);
      // The scores take the scratch dispatch.h promises them, whatever the heads.
      std::vector<float> score_scratch(kernels::sink_attention_scratch(0, 0, dim));
      std::vector<float> scratch(kernels::sink_attention_scratch(heads, slots, dim));
      for (int64_t block : {8, 24, 37}) {
        for (int64_t width : {int64_t{64}, int64_t{128}, dim}) {
          std::vector<float> scores(heads * slots), split(heads * dim);
          for (int64_t j0 = 0; j0 < slots; j0 += block)
            k.sink_scores(in.q.data(), heads, rows.slots.data() + j0, std::min(block, slots - j0), f, 0.125f,
                          score_scratch.data(), &scores[j0], slots);
          for (int64_t h0 = 0; h0 < heads; h0 += 4)
            for (int64_t d0 = 0; d0 < dim; d0 += width)
              k.sink_weighted_sum(&scores[h0 * slots], 4, slots, rows.slots.data(), slots, f, &in.sinks[h0], d0,
                                  std::min(dim, d0 + width), scratch.data(), &split[h0 * dim + d0], dim);
          EXPECT_EQ(std::memcmp(whole.data(), split.data(), sizeof(float) * whole.size()), 0)
              << label << " dim " << dim << " slot blocks of " << block << ", dimensions " << width << " a sum";
        }
      }
    });
  }
}

TEST(Kernels, SinkOnlyEntersTheDenominator) {
  const kernels::KvRowFormat f{0, 2};  // RoPE dims only: the floats as they are
  std::vector<float> q = {1, 0}, k0 = {1, 0}, k1 = {0, 1};
  std::vector<uint8_t> rows(2 * f.bytes());
  oracle().store_kv_row(k0.data(), f, rows.data());
  oracle().store_kv_row(k1.data(), f, rows.data() + f.bytes());
  const uint8_t* keys[2] = {rows.data(), rows.data() + f.bytes()};
  const float sink = 0.5f;
  std::vector<float> scratch(kernels::sink_attention_scratch(1, 2, 2)), out(2);
  oracle().sink_attention_heads(q.data(), 1, keys, 2, f, &sink, 1.0f, scratch.data(), out.data());
  const double e0 = std::exp(1.0), e1 = 1.0, es = std::exp(0.5);
  EXPECT_NEAR(out[0], e0 / (e0 + e1 + es), 1e-6);
  EXPECT_NEAR(out[1], e1 / (e0 + e1 + es), 1e-6);
}

// `n` index key rows of random values, and what each row stands for.
struct IndexKeys {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  std::vector<const uint8_t*> keys;
};

IndexKeys random_index_keys(int64_t n, int64_t dim, std::mt19937* rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  const int64_t row = kernels::index_row_bytes(dim);
  IndexKeys k{std::vector<uint8_t>(n * row), std::vector<float>(n * dim), std::vector<const uint8_t*>(n)};
  std::vector<float> x(dim);
  for (int64_t j = 0; j < n; ++j) {
    for (auto& v : x) v = d(*rng);
    kernels::store_index_row(x.data(), dim, &k.bytes[j * row]);
    kernels::load_index_row(&k.bytes[j * row], dim, &k.values[j * dim]);
    k.keys[j] = &k.bytes[j * row];
  }
  return k;
}

TEST(HeadDots, AreDotsWithTheKeysValues) {
  std::mt19937 rng(29);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t heads : {1, 5, 16, 20, 32, 64})
    for (int64_t keys_n : {1, 9, 40}) {
      const int64_t dim = 128;
      std::vector<float> q(heads * dim);
      for (auto& v : q) v = d(rng);
      const IndexKeys k = random_index_keys(keys_n, dim, &rng);
      const std::vector<float>& values = k.values;
      const std::vector<const uint8_t*>& keys = k.keys;
      std::vector<float> want(keys_n * heads);
      std::vector<float> scratch(kernels::head_dots_scratch(heads, dim));
      oracle().head_dots(q.data(), heads, keys.data(), keys_n, dim, scratch.data(), want.data());
      for (int64_t j = 0; j < keys_n; ++j)
        for (int64_t h = 0; h < heads; ++h)
          ASSERT_EQ(want[j * heads + h], kernels::dot(&q[h * dim], &values[j * dim], dim));
    }
}

// Fast numerics on AVX-512 score FP4 queries on the byte dot products: each
// 32-dimension block's products add up exactly, so a dot is the blocks'
// exact sums (each a float) added in order, bit for bit, whatever the heads,
// dimensions and keys. A query that is not FP4 takes the f32 body.
TEST(HeadDots, FastDotsOfFp4QueriesAreExactBlockSumsAddedInOrder) {
  ASSERT_TRUE(kernels::isa_supported(kernels::Isa::kAvx512)) << "this test's machine runs the AVX-512 kernels";
  const kernels::Kernels& fast = kernels::kernels_for(kernels::Isa::kAvx512, kernels::Numerics::kFast);
  std::mt19937 rng(41);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t dim : {32, 64, 96, 128, 224})
    for (int64_t heads : {1, 16, 20, 64, 72})
      for (int64_t keys_n : {1, 9}) {
        const int64_t blocks = dim / kernels::kIndexScaleBlock;
        std::vector<float> q(heads * dim);
        // Every other block 2^-20 smaller: an FMA chain rounds each of its
        // products onto the partial sum, the blocks' exact sums do not.
        for (int64_t i = 0; i < heads * dim; ++i)
          q[i] = d(rng) * 40.0f * (i % dim / kernels::kIndexScaleBlock % 2 ? 0x1p-20f : 1.0f);
        // A zero block, and one whose largest code rounds to 3 (the kernel
        // doubles its codes to reach 6).
        std::fill(q.begin(), q.begin() + kernels::kIndexScaleBlock, 0.0f);
        if (dim >= 64)
          for (int64_t i = 0; i < kernels::kIndexScaleBlock; ++i)
            q[kernels::kIndexScaleBlock + i] = i == 0 ? 3.2f : 0.1f * static_cast<float>(i % 5);
        kernels::fp4_quant_dequant(q.data(), heads * dim, kernels::kIndexScaleBlock);
        const IndexKeys k = random_index_keys(keys_n, dim, &rng);
        const std::vector<float>& values = k.values;
        const std::vector<const uint8_t*>& keys = k.keys;
        std::vector<float> got(keys_n * heads), scratch(kernels::head_dots_scratch(heads, dim));
        fast.head_dots(q.data(), heads, keys.data(), keys_n, dim, scratch.data(), got.data());
        for (int64_t j = 0; j < keys_n; ++j)
          for (int64_t h = 0; h < heads; ++h) {
            float want = 0.0f;
            for (int64_t b = 0; b < blocks; ++b) {
              double exact = 0.0;  // FP4 products of these sizes: every sum exact in double
              for (int64_t i = b * kernels::kIndexScaleBlock; i < (b + 1) * kernels::kIndexScaleBlock; ++i)
                exact += static_cast<double>(q[h * dim + i]) * values[j * dim + i];
              want = b == 0 ? static_cast<float>(exact) : want + static_cast<float>(exact);
            }
            ASSERT_EQ(got[j * heads + h], want) << "dim " << dim << " heads " << heads << " key " << j << " head " << h;
          }
        // Not FP4: the f32 body, as near the values' dots as the oracle.
        for (auto& v : q) v = d(rng);
        std::vector<float> want(keys_n * heads);
        oracle().head_dots(q.data(), heads, keys.data(), keys_n, dim, scratch.data(), want.data());
        fast.head_dots(q.data(), heads, keys.data(), keys_n, dim, scratch.data(), got.data());
        for (int64_t i = 0; i < keys_n * heads; ++i)
          ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << "dim " << dim << " at " << i;
      }
}

// A stored KV row stands for exactly what the reference's act_quant leaves
// in its cache (FP8 dims rounded per 64, RoPE dims unchanged), and the
// Flash row is 712 bytes (2048 as floats).
TEST(CacheRows, KvRowsHoldTheReferencesRoundedValues) {
  EXPECT_EQ((kernels::KvRowFormat{448, 64}.bytes()), 712);
  EXPECT_EQ(kernels::index_row_bytes(128), 68);
  for (const kernels::KvRowFormat f : {kernels::KvRowFormat{448, 64}, kernels::KvRowFormat{64, 16},
                                       kernels::KvRowFormat{0, 8}, kernels::KvRowFormat{512, 0}}) {
    const int64_t rows = 40;
    const std::vector<float> x = testing::hard_values(rows * f.dim(), 31);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = &x[r * f.dim()];
      std::vector<uint8_t> generic(f.bytes());
      oracle().store_kv_row(xr, f, generic.data());
      std::vector<float> want(xr, xr + f.dim()), got(f.dim());
      kernels::fp8_quant_dequant(want.data(), f.nope, kernels::kKvScaleBlock);
      kernels::load_kv_row(generic.data(), f, got.data());
      testing::expect_same_bits(want, got, "kv row");
    }
  }
}

TEST(CacheRows, IndexRowsHoldTheReferencesFp4RoundedValues) {
  for (int64_t dim : {32, 64, 128}) {
    const std::vector<float> x = testing::hard_values(50 * dim, 37);
    for (int64_t r = 0; r < 50; ++r) {
      std::vector<float> want(&x[r * dim], &x[(r + 1) * dim]), got(dim);
      std::vector<uint8_t> row(kernels::index_row_bytes(dim));
      kernels::store_index_row(want.data(), dim, row.data());
      kernels::fp4_quant_dequant(want.data(), dim, kernels::kIndexScaleBlock);
      kernels::load_index_row(row.data(), dim, got.data());
      testing::expect_same_bits(want, got, "index row");
    }
  }
}

}  // namespace
}  // namespace dsv4
