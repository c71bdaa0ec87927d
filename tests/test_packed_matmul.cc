// The generic exact packed-panel GEMMs (the oracle the other bodies are
// checked against in test_ops.cc) equal matmul_nt, the reference's
// left-to-right order, on the weights the panels stand for; and DSV4_ISA
// picks the path, every path giving the golden numbers.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "test_util.h"

namespace dsv4 {
namespace {

// Bit-for-bit equal (also for empty shapes, where memcmp may not be given
// the null data() of an empty vector).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0);
}

using kernels::Isa;
using kernels::Numerics;

const kernels::Kernels& oracle() { return kernels::kernels_for(Isa::kGeneric, Numerics::kExact); }

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(PackedMatmul, GenericEqualsMatmulNtBitForBit) {
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape& s : {Shape{1, 1, 1}, Shape{1, 16, 64}, Shape{3, 17, 5}, Shape{5, 70, 300}, Shape{9, 129, 513},
                         Shape{4, 64, 256}, Shape{2, 33, 0}}) {
    const auto x = random_floats(s.m * s.k, 1), w = random_floats(s.n * s.k, 2);
    std::vector<float> want(s.m * s.n);
    kernels::matmul_nt(x.data(), s.m, s.k, w.data(), 0, s.n, want.data(), s.n);
    std::vector<float> packed(kernels::packed_floats(s.n, s.k));
    kernels::pack_panels(w.data(), s.n, s.k, packed.data());
    const int64_t panels = (s.n + kernels::kPanel - 1) / kernels::kPanel;
    std::vector<float> got(s.m * s.n, -1.0f);
    oracle().matmul_f32(x.data(), s.m, s.k, packed.data(), s.n, 0, panels, got.data(), s.n);
    EXPECT_TRUE(same_bits(got, want)) << "m " << s.m << " n " << s.n << " k " << s.k;
  }
}

// BF16, FP8 (scales per 128 or per 32 inputs) and FP4 panels: the generic
// body equals matmul_nt on the dequantized weights (code value times scale)
// bit for bit.
TEST(PackedMatmul, QuantizedPanelsEqualTheDequantizedOracle) {
  struct Shape {
    int64_t m, n, k;
  };
  std::mt19937 rng(5);
  using kernels::PanelFormat;
  for (PanelFormat f : {PanelFormat::kBf16, PanelFormat::kFp8, PanelFormat::kFp4, PanelFormat::kFp8Block32}) {
    const bool bf16 = f == PanelFormat::kBf16;
    const int64_t block = bf16 ? 1 : kernels::panel_block(f);
    for (const Shape& s : {Shape{1, 16, 128}, Shape{3, 21, 256}, Shape{6, 70, 384}, Shape{1, 5, 128}, Shape{5, 130, 640}, Shape{0, 16, 128}}) {
      const int64_t blocks = bf16 ? 0 : s.k / block;
      std::vector<uint8_t> codes(s.n * s.k * (bf16 ? 2 : 1)), scales(s.n * blocks);
      std::vector<float> w(s.n * s.k);
      for (int64_t i = 0; i < s.n * s.k; ++i) {
        if (bf16) {
          const uint16_t v = f32_to_bf16(std::normal_distribution<float>(0.0f, 1.0f)(rng));
          std::memcpy(&codes[2 * i], &v, 2);
          w[i] = bf16_to_f32(v);
          continue;
        }
        uint8_t c = static_cast<uint8_t>(rng() % (kernels::is_fp8(f) ? 256 : 16));
        if (kernels::is_fp8(f) && (c & 0x7F) == 0x7F) c ^= 1;  // no NaN codes
        codes[i] = c;
      }
      for (auto& sc : scales) sc = static_cast<uint8_t>(100 + rng() % 40);
      for (int64_t j = 0; j < s.n && !bf16; ++j)
        for (int64_t t = 0; t < s.k; ++t) {
          const uint8_t c = codes[j * s.k + t];
          w[j * s.k + t] = (kernels::is_fp8(f) ? e4m3_to_f32(c) : e2m1_to_f32(c)) *
                           e8m0_to_f32(scales[j * blocks + t / block]);
        }
      const auto x = random_floats(s.m * s.k, 3);
      std::vector<float> want(s.m * s.n);
      kernels::matmul_nt(x.data(), s.m, s.k, w.data(), 0, s.n, want.data(), s.n);
      std::vector<uint8_t> pc(kernels::packed_code_bytes(f, s.n, s.k)), ps(kernels::packed_scale_bytes(f, s.n, s.k));
      kernels::pack_quantized_panels(f, codes.data(), scales.data(), s.n, s.k, pc.data(), ps.data());
      const kernels::QuantizedPanels q{f, pc.data(), ps.data()};
      const int64_t panels = (s.n + kernels::kPanel - 1) / kernels::kPanel;
      std::vector<float> got(s.m * s.n, -1.0f);
      oracle().matmul_quantized(x.data(), s.m, s.k, q, s.n, 0, panels, got.data(), s.n);
      EXPECT_TRUE(same_bits(got, want)) << "format " << static_cast<int>(f) << " m " << s.m << " n " << s.n << " k "
                                        << s.k;
      if (bf16) continue;
      // Inputs rounded through e4m3 (as FP8/FP4 linears round them), as BF16
      // pairs: the dot-product path adds exactly as the oracle does.
      std::vector<float> rounded = x;
      for (int64_t i = 0; i < s.m; ++i) kernels::fp8_quant_dequant(rounded.data() + i * s.k, s.k, 128);
      std::vector<uint32_t> pairs(s.m * s.k / 2);
      kernels::pack_bf16_pairs(rounded.data(), s.m, s.k, pairs.data());
      kernels::matmul_nt(rounded.data(), s.m, s.k, w.data(), 0, s.n, want.data(), s.n);
      std::fill(got.begin(), got.end(), -1.0f);
      oracle().matmul_quantized_pairs(pairs.data(), s.m, s.k, q, s.n, 0, panels, got.data(), s.n);
      EXPECT_TRUE(same_bits(got, want)) << "pairs format " << static_cast<int>(f) << " m " << s.m << " n " << s.n
                                        << " k " << s.k;
    }
  }
}

// The loader packs rows straight from the checkpoint's layout (FP4 two codes
// a byte), a panel-aligned piece at a time: the same bytes as the per-code
// oracle packing all rows at once.
TEST(PackedMatmul, StoredCodesPackLikeThePerCodeOracleInPieces) {
  using kernels::PanelFormat;
  std::mt19937 rng(11);
  for (PanelFormat f : {PanelFormat::kBf16, PanelFormat::kFp8, PanelFormat::kFp4, PanelFormat::kFp8Block32}) {
    for (int64_t n : {1, 16, 37, 100}) {
      const int64_t k = 256, blocks = f == PanelFormat::kBf16 ? 0 : k / kernels::panel_block(f);
      const int64_t code_bytes = f == PanelFormat::kBf16 ? 2 : 1;
      std::vector<uint8_t> codes(n * k * code_bytes), scales(n * blocks);
      for (auto& c : codes) c = static_cast<uint8_t>(rng() % (f == PanelFormat::kFp4 ? 16 : 256));
      for (auto& sc : scales) sc = static_cast<uint8_t>(100 + rng() % 40);
      std::vector<uint8_t> stored(codes);
      if (f == PanelFormat::kFp4) {  // two codes a byte, low nibble first
        stored.assign(n * k / 2, 0);
        for (int64_t i = 0; i < n * k; ++i) stored[i / 2] |= static_cast<uint8_t>(codes[i] << (4 * (i % 2)));
      }
      std::vector<uint8_t> want_codes(kernels::packed_code_bytes(f, n, k)), want_scales(kernels::packed_scale_bytes(f, n, k));
      kernels::pack_quantized_panels(f, codes.data(), scales.data(), n, k, want_codes.data(), want_scales.data());
      std::vector<uint8_t> got_codes(want_codes.size(), 0xAB), got_scales(want_scales.size(), 0xAB);
      const int64_t row_bytes = static_cast<int64_t>(stored.size()) / n, piece = 32;
      for (int64_t r = 0; r < n; r += piece) {
        const int64_t m = std::min(piece, n - r);
        kernels::pack_stored_codes(f, stored.data() + r * row_bytes, m, k,
                                   got_codes.data() + r / kernels::kPanel * kernels::packed_code_bytes(f, 16, k));
        kernels::pack_row_scales(f, scales.data() + r * blocks, m, k,
                                 got_scales.data() + r / kernels::kPanel * kernels::packed_scale_bytes(f, 16, k));
      }
      EXPECT_EQ(got_codes, want_codes) << "format " << static_cast<int>(f) << " n " << n;
      EXPECT_EQ(got_scales, want_scales) << "format " << static_cast<int>(f) << " n " << n;
    }
  }
}

TEST(PackedMatmul, IsaIsChosenOnceAndOverridable) {
  const Isa best = kernels::isa_supported(Isa::kAvx512) ? Isa::kAvx512
                   : kernels::isa_supported(Isa::kAvx2) ? Isa::kAvx2
                                                        : Isa::kGeneric;
  if (!std::getenv("DSV4_ISA")) {
    EXPECT_EQ(kernels::active_isa(), best);
  }
  // The binary on the generic path gives the same golden numbers.
  const auto best_isa = testing::run_dsv4("verify --model " + testing::golden_dir() + "/small-fp8 --chunk 7");
  const auto generic =
      testing::run_dsv4("verify --model " + testing::golden_dir() + "/small-fp8 --chunk 7", "DSV4_ISA=generic");
  ASSERT_EQ(best_isa.code, 0) << best_isa.output;
  ASSERT_EQ(generic.code, 0) << generic.output;
  auto table = [](const std::string& out) { return out.substr(out.find("  tensor")); };
  EXPECT_EQ(table(best_isa.output), table(generic.output));
  if (kernels::isa_supported(Isa::kAvx512)) {
    const auto avx512 =
        testing::run_dsv4("verify --model " + testing::golden_dir() + "/small-fp8 --chunk 7", "DSV4_ISA=avx512");
    ASSERT_EQ(avx512.code, 0) << avx512.output;
    EXPECT_EQ(table(avx512.output), table(generic.output));
    EXPECT_NE(avx512.output.find("kernels avx512"), std::string::npos) << avx512.output;
  }
  if (kernels::isa_supported(Isa::kAvx2)) {
    const auto avx2 =
        testing::run_dsv4("verify --model " + testing::golden_dir() + "/small-fp8 --chunk 7", "DSV4_ISA=avx2");
    ASSERT_EQ(avx2.code, 0) << avx2.output;
    EXPECT_EQ(table(avx2.output), table(generic.output));
    EXPECT_NE(avx2.output.find("kernels avx2"), std::string::npos) << avx2.output;
  }
  EXPECT_NE(best_isa.output.find(std::string("kernels ") + kernels::isa_name(best)), std::string::npos) << best_isa.output;
  EXPECT_NE(generic.output.find("kernels generic"), std::string::npos) << generic.output;
}

}  // namespace
}  // namespace dsv4
