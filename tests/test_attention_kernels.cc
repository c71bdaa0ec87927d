// Sink attention over a group of heads: the AVX-512 body equals the generic
// one (each head through sink_attention) bit for bit, masked slots included.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/isa.h"
#include "kernels/kernels.h"

namespace dsv4 {
namespace {

TEST(SinkAttentionHeads, EveryIsaEqualsTheGenericBitForBit) {
  if (!kernels::isa_supported(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  struct Shape {
    int64_t heads, slots, dim;
  };
  for (const Shape& s : {Shape{1, 1, 16}, Shape{5, 13, 48}, Shape{16, 37, 512}, Shape{4, 200, 272}, Shape{16, 8, 64}}) {
    std::vector<float> q(s.heads * s.dim), sinks(s.heads), rows(s.slots * s.dim);
    for (auto& v : q) v = d(rng);
    for (auto& v : sinks) v = d(rng);
    for (auto& v : rows) v = d(rng);
    std::vector<const float*> keys(s.slots);
    for (int64_t j = 0; j < s.slots; ++j) keys[j] = (j % 7 == 3) ? nullptr : &rows[j * s.dim];  // some masked
    std::vector<float> want(s.heads * s.dim), got(s.heads * s.dim, -1.0f);
    std::vector<float> scratch(s.heads * (s.slots + s.dim) + 16 * s.dim);
    kernels::sink_attention_heads_generic(q.data(), s.heads, keys.data(), s.slots, s.dim, sinks.data(), 0.125f,
                                          scratch.data(), want.data());
    kernels::sink_attention_heads_avx512(q.data(), s.heads, keys.data(), s.slots, s.dim, sinks.data(), 0.125f,
                                         scratch.data(), got.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * want.size()))
        << "heads " << s.heads << " slots " << s.slots << " dim " << s.dim;
  }
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// The AVX-512 FP8 round trip equals the generic one on every kind of value:
// normals, e4m3 subnormals, exact ties, zeros of both signs, saturation.
TEST(Fp8RoundTrip, Avx512EqualsTheGenericBitForBit) {
  if (!kernels::isa_supported(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(17);
  std::vector<float> x(128 * 64);
  for (size_t i = 0; i < x.size(); ++i) {
    const int kind = static_cast<int>(i % 6);
    const float r = std::ldexp(static_cast<float>(rng() % 4096) / 4096.0f, static_cast<int>(rng() % 40) - 30);
    if (kind == 0) x[i] = r;
    else if (kind == 1) x[i] = -r;
    else if (kind == 2) x[i] = (static_cast<float>(rng() % 64) + 0.5f) * std::ldexp(1.0f, -9);  // ties near subnormals
    else if (kind == 3) x[i] = (rng() % 2) ? 0.0f : -0.0f;
    else if (kind == 4) x[i] = (static_cast<float>(rng() % 16) + 8.5f) * std::ldexp(1.0f, static_cast<int>(rng() % 8));
    else x[i] = std::ldexp(static_cast<float>(rng() % 1000) - 500.0f, static_cast<int>(rng() % 20) - 10);
  }
  // A block of only tiny values (the 1e-4 amax floor) and one of zeros.
  for (int i = 0; i < 128; ++i) x[128 + i] = 1e-7f * static_cast<float>(i % 5), x[256 + i] = 0.0f;
  std::vector<float> want = x, got = x;
  const kernels::Isa before = kernels::active_isa();
  kernels::set_isa(kernels::Isa::kGeneric);
  kernels::fp8_quant_dequant(want.data(), static_cast<int64_t>(want.size()), 128, true);
  kernels::set_isa(kernels::Isa::kAvx512);
  kernels::fp8_quant_dequant(got.data(), static_cast<int64_t>(got.size()), 128, true);
  kernels::set_isa(before);
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &want[i], 4);
    std::memcpy(&b, &got[i], 4);
    ASSERT_EQ(a, b) << "element " << i << " x " << x[i] << " generic " << want[i] << " avx512 " << got[i];
  }
}

TEST(Hadamard, Avx512EqualsTheGenericBitForBit) {
  if (!kernels::isa_supported(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(23);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t n : {16, 64, 128, 512}) {
    std::vector<float> x(n), scratch(n);
    for (auto& v : x) v = d(rng);
    std::vector<float> want = x, got = x;
    kernels::hadamard_generic(want.data(), n, scratch.data());
    kernels::hadamard_avx512(got.data(), n, scratch.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * n)) << "n " << n;
  }
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

TEST(HeadDots, Avx512EqualsTheGenericBitForBit) {
  if (!kernels::isa_supported(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(29);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t heads : {1, 5, 16, 20, 32})
    for (int64_t keys_n : {1, 9, 40}) {
      const int64_t dim = 128;
      std::vector<float> q(heads * dim), rows(keys_n * dim), scratch(16 * dim);
      for (auto& v : q) v = d(rng);
      for (auto& v : rows) v = d(rng);
      std::vector<const float*> keys(keys_n);
      for (int64_t j = 0; j < keys_n; ++j) keys[j] = &rows[j * dim];
      std::vector<float> want(keys_n * heads), got(keys_n * heads, -1.0f);
      kernels::head_dots_generic(q.data(), heads, keys.data(), keys_n, dim, want.data());
      kernels::head_dots_avx512(q.data(), heads, keys.data(), keys_n, dim, scratch.data(), got.data());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * want.size()))
          << "heads " << heads << " keys " << keys_n;
    }
}

}  // namespace
}  // namespace dsv4
