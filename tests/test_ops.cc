// One harness for every kernel of the dispatch table (the spirit of
// llama.cpp's test-backend-ops): each op runs on awkward shapes (rows that
// do not fill a register block, columns that do not fill a panel, k not a
// multiple of a slice, empty inputs) on every ISA this CPU has, in both
// numerics, against the generic exact body: exact bodies bit-identical,
// fast bodies within the tolerance written next to the op. GEMMs also run
// each row alone: a row's outputs must not depend on the other rows of the
// batch (batch invariance), in fast numerics too. Adding an op or an ISA
// means adding it to the tables below.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "kernels/cache_rows.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using kernels::Isa;
using kernels::Kernels;
using kernels::Numerics;

struct Shape {
  int64_t a = 0, b = 0, c = 0, d = 0;  // the op's own meaning (rows, columns, depth, ...)
};

std::string describe(const Shape& s) {
  return "(" + std::to_string(s.a) + ", " + std::to_string(s.b) + ", " + std::to_string(s.c) + ", " +
         std::to_string(s.d) + ")";
}

std::vector<float> normals(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Outputs as floats (byte outputs widened) for comparison.
using Output = std::vector<float>;

struct Op {
  std::string name;
  // Fast bodies: relative L2 error against the generic exact body at most
  // this (0: the very same bits, e.g. roundings the format defines).
  double fast_tolerance;
  std::vector<Shape> shapes;
  std::function<Output(const Kernels&, const Shape&)> run;
  // GEMMs: runs rows [row, row + 1) of the shape alone, for batch invariance.
  std::function<Output(const Kernels&, const Shape&, int64_t row)> run_row;
};

void PrintTo(const Op& op, std::ostream* os) { *os << op.name; }

double rel_l2(const Output& got, const Output& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

bool same_bits(const Output& a, const Output& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0);
}

// --- GEMMs on packed panels --------------------------------------------------

int64_t panels_of(int64_t n) { return (n + kernels::kPanel - 1) / kernels::kPanel; }

// A GEMM over two panel ranges, as the thread pool splits it.
template <class Call>
Output two_ranges(int64_t m, int64_t n, Call call) {
  Output y(m * n, -1.0f);
  const int64_t panels = panels_of(n);
  call(0, panels / 2, y.data());
  call(panels / 2, panels, y.data());
  return y;
}

struct F32Weights {
  std::vector<float> packed;
  F32Weights(int64_t n, int64_t k) : packed(kernels::packed_floats(n, k)) {
    const auto w = normals(n * k, 2);
    kernels::pack_panels(w.data(), n, k, packed.data());
  }
};

struct QuantizedWeights {
  kernels::PanelFormat format;
  std::vector<uint8_t> codes, scales;
  QuantizedWeights(kernels::PanelFormat f, int64_t n, int64_t k) : format(f) {
    std::mt19937 rng(5);
    const bool bf16 = f == kernels::PanelFormat::kBf16;
    const int64_t blocks = bf16 ? 0 : (k + kernels::panel_block(f) - 1) / kernels::panel_block(f);
    std::vector<uint8_t> raw(n * k * (bf16 ? 2 : 1)), raw_scales(n * blocks);
    for (int64_t i = 0; i < n * k; ++i) {
      if (bf16) {
        const uint16_t v = f32_to_bf16(std::normal_distribution<float>(0.0f, 0.1f)(rng));
        std::memcpy(&raw[2 * i], &v, 2);
        continue;
      }
      uint8_t c = static_cast<uint8_t>(rng() % (kernels::is_fp8(f) ? 256 : 16));
      if (kernels::is_fp8(f) && (c & 0x7F) == 0x7F) c ^= 1;  // no NaN codes
      raw[i] = c;
    }
    for (auto& s : raw_scales) s = static_cast<uint8_t>(110 + rng() % 20);
    codes.resize(kernels::packed_code_bytes(f, n, k));
    scales.resize(kernels::packed_scale_bytes(f, n, k));
    kernels::pack_quantized_panels(f, raw.data(), raw_scales.data(), n, k, codes.data(), scales.data());
  }
  kernels::QuantizedPanels panels() const { return {format, codes.data(), scales.data()}; }
};

// Rows rounded through e4m3 per 128 (every FP8/FP4 linear's input), as pairs.
std::vector<uint32_t> rounded_pairs(int64_t m, int64_t k, uint32_t seed) {
  auto x = normals(m * k, seed, 3.0f);
  for (int64_t i = 0; i < m; ++i) kernels::fp8_quant_dequant(x.data() + i * k, k, 128);
  std::vector<uint32_t> pairs(m * k / 2);
  kernels::pack_bf16_pairs(x.data(), m, k, pairs.data());
  return pairs;
}

// The last shape's k passes AVX-512's longest F32 slice (2048 steps), so
// its partial sums park in y between slices.
const std::vector<Shape> kF32Shapes = {{1, 1, 1},    {1, 16, 64}, {3, 17, 5},   {5, 70, 300}, {9, 129, 513},
                                       {4, 64, 256}, {2, 33, 0},  {0, 16, 64}, {17, 40, 1000}, {6, 40, 2100}};
// k: whole activation blocks of 128 (as every FP8/FP4 linear has), not
// always whole slices of 256; the last passes AVX-512's longest BF16 slice
// (4096 steps).
const std::vector<Shape> kQuantizedShapes = {{1, 16, 128},  {3, 21, 256},   {6, 70, 384},  {1, 5, 128}, {5, 130, 640},
                                             {0, 16, 128},  {13, 33, 1152}, {2, 17, 896}, {5, 20, 4224}};

Op f32_gemm() {
  auto run_rows = [](const Kernels& k, const Shape& s, int64_t r0, int64_t rows) {
    const F32Weights w(s.b, s.c);
    const auto x = normals(s.a * s.c, 1);
    return two_ranges(rows, s.b, [&](int64_t p0, int64_t p1, float* y) {
      k.matmul_f32(x.data() + r0 * s.c, rows, s.c, w.packed.data(), s.b, p0, p1, y, s.b);
    });
  };
  return {"matmul_f32 (m, n, k)", 1e-5, kF32Shapes,
          [=](const Kernels& k, const Shape& s) { return run_rows(k, s, 0, s.a); },
          [=](const Kernels& k, const Shape& s, int64_t row) { return run_rows(k, s, row, 1); }};
}

Op quantized_gemm(kernels::PanelFormat f, const char* name) {
  auto run_rows = [f](const Kernels& k, const Shape& s, int64_t r0, int64_t rows) {
    const QuantizedWeights w(f, s.b, s.c);
    const auto x = normals(s.a * s.c, 3);
    return two_ranges(rows, s.b, [&](int64_t p0, int64_t p1, float* y) {
      k.matmul_quantized(x.data() + r0 * s.c, rows, s.c, w.panels(), s.b, p0, p1, y, s.b);
    });
  };
  return {name, 1e-5, kQuantizedShapes, [=](const Kernels& k, const Shape& s) { return run_rows(k, s, 0, s.a); },
          [=](const Kernels& k, const Shape& s, int64_t row) { return run_rows(k, s, row, 1); }};
}

Op pairs_gemm(kernels::PanelFormat f, const char* name) {
  auto run_rows = [f](const Kernels& k, const Shape& s, int64_t r0, int64_t rows) {
    const QuantizedWeights w(f, s.b, s.c);
    const auto pairs = rounded_pairs(s.a, s.c, 4);
    return two_ranges(rows, s.b, [&](int64_t p0, int64_t p1, float* y) {
      k.matmul_quantized_pairs(pairs.data() + r0 * s.c / 2, rows, s.c, w.panels(), s.b, p0, p1, y, s.b);
    });
  };
  return {name, 1e-5, kQuantizedShapes, [=](const Kernels& k, const Shape& s) { return run_rows(k, s, 0, s.a); },
          [=](const Kernels& k, const Shape& s, int64_t row) { return run_rows(k, s, row, 1); }};
}

Op int8_gemm() {
  auto run_rows = [](const Kernels& k, const Shape& s, int64_t r0, int64_t rows) {
    std::mt19937 rng(9);
    std::vector<int8_t> w(s.b * s.c);
    for (auto& v : w) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    std::vector<float> channel(s.b);
    for (auto& c : channel) c = std::ldexp(1.0f + (rng() % 100) / 100.0f, -9);
    std::vector<uint8_t> codes(kernels::int8_code_bytes(s.b, s.c)), extra(kernels::int8_panel_extra_bytes(s.b));
    kernels::pack_int8_panels(w.data(), channel.data(), s.b, s.c, codes.data(), extra.data());
    const auto x = normals(s.a * s.c, 10);
    const int64_t kp = kernels::int8_padded_k(s.c);
    std::vector<uint8_t> biased(s.a * kp);
    std::vector<float> row_scales(s.a);
    k.quantize_rows_int8(x.data(), s.a, s.c, biased.data(), row_scales.data());
    return two_ranges(rows, s.b, [&](int64_t p0, int64_t p1, float* y) {
      k.matmul_int8(biased.data() + r0 * kp, row_scales.data() + r0, rows, s.c, {codes.data(), extra.data()}, s.b,
                    p0, p1, y, s.b);
    });
  };
  // Integer sums are exact: every body gives the same bits.
  return {"int8 quantize + matmul (m, n, k)", 0.0,
          {{1, 16, 64}, {3, 21, 70}, {6, 70, 257}, {5, 130, 512}, {1, 5, 3}, {0, 16, 64}},
          [=](const Kernels& k, const Shape& s) { return run_rows(k, s, 0, s.a); },
          [=](const Kernels& k, const Shape& s, int64_t row) { return run_rows(k, s, row, 1); }};
}

// --- Elementwise, cache rows, attention --------------------------------------

Op round_trip(bool fp8) {
  return {fp8 ? "fp8_round_trip (n, block)" : "fp4_round_trip (n, block)", 0.0,
          {{128 * 64, 128}, {64 * 9, 64}, {32 * 5, 32}, {48, 16}, {0, 128}},
          [fp8](const Kernels& k, const Shape& s) {
            Output x = testing::hard_values(s.a, 17);
            (fp8 ? k.fp8_round_trip : k.fp4_round_trip)(x.data(), s.a, s.b);
            return x;
          },
          nullptr};
}

Op hadamard() {
  return {"hadamard (n)", 1e-6, {{8}, {16}, {64}, {128}, {512}},
          [](const Kernels& k, const Shape& s) {
            Output x = normals(s.a, 23), scratch(s.a);
            k.hadamard(x.data(), s.a, scratch.data());
            return x;
          },
          nullptr};
}

Op store_kv_row() {
  return {"store_kv_row (nope, rope, rows)", 0.0,
          {{448, 64, 40}, {64, 16, 9}, {0, 8, 3}, {512, 0, 5}, {128, 2, 7}},
          [](const Kernels& k, const Shape& s) {
            const kernels::KvRowFormat f{s.a, s.b};
            const auto x = testing::hard_values(s.c * f.dim(), 31);
            std::vector<uint8_t> rows(s.c * f.bytes());
            for (int64_t r = 0; r < s.c; ++r) k.store_kv_row(&x[r * f.dim()], f, &rows[r * f.bytes()]);
            return Output(rows.begin(), rows.end());
          },
          nullptr};
}

// KV rows of random values, every 7th slot (from the 4th) masked.
struct CodedKeys {
  kernels::KvRowFormat format;
  std::vector<uint8_t> bytes;
  std::vector<const uint8_t*> slots;
  CodedKeys(const kernels::KvRowFormat& f, int64_t n, uint32_t seed) : format(f), bytes(n * f.bytes()) {
    const auto x = normals(n * f.dim(), seed, 3.0f);
    const Kernels& oracle = kernels::kernels_for(Isa::kGeneric, Numerics::kExact);
    for (int64_t j = 0; j < n; ++j) {
      oracle.store_kv_row(&x[j * f.dim()], f, &bytes[j * f.bytes()]);
      slots.push_back(j % 7 == 3 ? nullptr : &bytes[j * f.bytes()]);
    }
  }
};

Op sink_attention() {
  return {"sink_attention_heads (heads, slots, nope, rope)", 1e-5,
          {{1, 1, 0, 16}, {5, 13, 64, 16}, {16, 37, 448, 64}, {4, 200, 192, 80}, {16, 8, 64, 0}, {3, 9, 128, 2},
           {16, 640, 448, 64}},
          [](const Kernels& k, const Shape& s) {
            const CodedKeys keys({s.c, s.d}, s.b, 7);
            const int64_t dim = s.c + s.d;
            const auto q = normals(s.a * dim, 8), sinks = normals(s.a, 9);
            Output out(s.a * dim), scratch(kernels::sink_attention_scratch(s.a, s.b, dim));
            k.sink_attention_heads(q.data(), s.a, keys.slots.data(), s.b, keys.format, sinks.data(), 0.125f,
                                   scratch.data(), out.data());
            return out;
          },
          nullptr};
}

Op head_dots() {
  return {"head_dots (heads, keys, dim)", 1e-5,
          {{1, 1, 128}, {5, 9, 128}, {16, 40, 128}, {20, 9, 64}, {64, 33, 128}, {3, 4, 32}},
          [](const Kernels& k, const Shape& s) {
            const Kernels& oracle = kernels::kernels_for(Isa::kGeneric, Numerics::kExact);
            const int64_t row = kernels::index_row_bytes(s.c);
            std::vector<uint8_t> rows(s.b * row);
            std::vector<const uint8_t*> keys;
            const auto x = normals(s.b * s.c, 11);
            Output rounded = normals(s.a * s.c, 12);
            oracle.fp4_round_trip(rounded.data(), s.a * s.c, kernels::kIndexScaleBlock);
            for (int64_t j = 0; j < s.b; ++j) {
              kernels::store_index_row(&x[j * s.c], s.c, &rows[j * row]);
              keys.push_back(&rows[j * row]);
            }
            Output dots(s.b * s.a), scratch(kernels::head_dots_scratch(s.a, s.c));
            k.head_dots(rounded.data(), s.a, keys.data(), s.b, s.c, scratch.data(), dots.data());
            return dots;
          },
          nullptr};
}

Op silu() {
  // (n, index0, total): spans that start inside, straddle and follow the
  // part of the tensor the reference's vector loop covers.
  return {"silu (n, index0, total)", 0,
          {{0, 0, 16}, {5, 0, 5}, {37, 0, 40}, {40, 0, 40}, {64, 16, 90}, {33, 7, 41}, {100, 3, 120}},
          [](const Kernels& k, const Shape& s) {
            Output x = normals(s.a, 13, 4.0f);
            if (s.a > 3) x[3] = 0.0f, x[1] = -200.0f, x[2] = 150.0f;  // the exp's clamps
            k.silu(x.data(), s.a, s.b, s.c);
            return x;
          },
          nullptr};
}

// (m, n, scaled): m input rows, a block of n inputs, block-scaled or not;
// the accumulators start from earlier blocks' sums.
Op v41_block() {
  return {"v41_block (m, n, scaled)", 0,
          {{1, 32, 1}, {5, 32, 1}, {9, 17, 1}, {4, 32, 0}, {7, 3, 0}, {13, 32, 0}, {0, 32, 1}},
          [](const Kernels& k, const Shape& s) {
            const int64_t lda = 40;
            const auto a = normals(std::max<int64_t>(1, s.a) * lda, 21), tile = normals(s.b * kernels::kPanel, 22);
            const auto sx = normals(std::max<int64_t>(1, s.a), 23), wscale = normals(kernels::kPanel, 24);
            Output acc = normals(std::max<int64_t>(1, s.a) * kernels::kPanel, 25);
            k.v41_block(a.data(), lda, s.a, tile.data(), s.b, sx.data(), s.c ? wscale.data() : nullptr, acc.data());
            return acc;
          },
          nullptr};
}

// (heads, n, dim): n KV rows, every 5th unused, blocks of 64 and a tail;
// a dim the vector body does not take goes to the generic one.
Op v41_sparse_attention() {
  return {"v41_sparse_attention (heads, n, dim)", 1e-5,
          {{1, 1, 16}, {4, 63, 128}, {3, 64, 32}, {8, 150, 128}, {2, 200, 24}, {5, 0, 16}, {3, 70, 80}},
          [](const Kernels& k, const Shape& s) {
            const auto rows = normals(std::max<int64_t>(1, s.b) * s.c, 31, 2.0f);
            const auto q = normals(s.a * s.c, 32), sinks = normals(s.a, 33);
            std::vector<const float*> kv;
            for (int64_t j = 0; j < s.b; ++j) kv.push_back(j % 5 == 2 ? nullptr : &rows[j * s.c]);
            Output out(s.a * s.c);
            k.v41_sparse_attention(q.data(), s.a, s.c, kv.data(), s.b, sinks.data(), 0.09f, out.data());
            return out;
          },
          nullptr};
}

std::vector<Op> all_ops() {
  using kernels::PanelFormat;
  return {f32_gemm(),
          quantized_gemm(PanelFormat::kBf16, "matmul_quantized BF16 (m, n, k)"),
          quantized_gemm(PanelFormat::kFp8, "matmul_quantized FP8 (m, n, k)"),
          quantized_gemm(PanelFormat::kFp4, "matmul_quantized FP4 (m, n, k)"),
          pairs_gemm(PanelFormat::kFp8, "matmul_quantized_pairs FP8 (m, n, k)"),
          pairs_gemm(PanelFormat::kFp4, "matmul_quantized_pairs FP4 (m, n, k)"),
          quantized_gemm(PanelFormat::kFp8Block32, "matmul_quantized FP8, 32 inputs a scale (m, n, k)"),
          pairs_gemm(PanelFormat::kFp8Block32, "matmul_quantized_pairs FP8, 32 inputs a scale (m, n, k)"),
          int8_gemm(),
          silu(),
          round_trip(true),
          round_trip(false),
          hadamard(),
          store_kv_row(),
          sink_attention(),
          head_dots(),
          v41_block(),
          v41_sparse_attention()};
}

class Ops : public ::testing::TestWithParam<Op> {};

TEST_P(Ops, EveryIsaAndNumericsAgainstTheGenericExactBody) {
  const Op& op = GetParam();
  const Kernels& oracle = kernels::kernels_for(Isa::kGeneric, Numerics::kExact);
  for (const Shape& s : op.shapes) {
    const Output want = op.run(oracle, s);
    for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
      if (!kernels::isa_supported(isa)) continue;
      for (Numerics n : {Numerics::kExact, Numerics::kFast}) {
        const Kernels& k = kernels::kernels_for(isa, n);
        const std::string where = op.name + " " + describe(s) + " on " + kernels::isa_name(isa) + " " +
                                  kernels::numerics_name(n);
        const Output got = op.run(k, s);
        ASSERT_EQ(got.size(), want.size()) << where;
        if (n == Numerics::kExact || op.fast_tolerance == 0) {
          EXPECT_TRUE(same_bits(got, want)) << where << ": not bit-identical";
        } else {
          EXPECT_LE(rel_l2(got, want), op.fast_tolerance) << where;
        }
        // Batch invariance: each row alone gives the same bits.
        if (!op.run_row || s.b == 0) continue;
        for (int64_t row = 0; row < s.a; ++row) {
          const Output alone = op.run_row(k, s, row);
          EXPECT_EQ(0, std::memcmp(alone.data(), &got[row * s.b], sizeof(float) * s.b))
              << where << ": row " << row << " alone differs from the batch";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Table, Ops, ::testing::ValuesIn(all_ops()), [](const auto& info) {
  std::string n = info.param.name.substr(0, info.param.name.find(" ("));
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});

}  // namespace
}  // namespace dsv4
