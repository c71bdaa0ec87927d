// The packed-panel GEMM on every ISA path equals matmul_nt (the
// left-to-right oracle) bit for bit, for shapes that do not fill a panel,
// a register block or a k slice; and DSV4_ISA picks the path.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/isa.h"
#include "kernels/kernels.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using kernels::Isa;

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(PackedMatmul, EveryIsaEqualsTheOracleBitForBit) {
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
    for (Isa isa : {Isa::kGeneric, Isa::kAvx512}) {
      if (!kernels::isa_supported(isa)) continue;
      std::vector<float> got(s.m * s.n, -1.0f);
      // In two panel ranges, as the thread pool splits it.
      auto run = isa == Isa::kGeneric ? &kernels::matmul_packed_generic : &kernels::matmul_packed_avx512;
      run(x.data(), s.m, s.k, packed.data(), s.n, 0, panels / 2, got.data(), s.n);
      run(x.data(), s.m, s.k, packed.data(), s.n, panels / 2, panels, got.data(), s.n);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * want.size()))
          << kernels::isa_name(isa) << " m " << s.m << " n " << s.n << " k " << s.k;
    }
  }
}

TEST(PackedMatmul, IsaIsChosenOnceAndOverridable) {
  const Isa best = kernels::isa_supported(Isa::kAvx512) ? Isa::kAvx512 : Isa::kGeneric;
  if (!std::getenv("DSV4_ISA")) {
    EXPECT_EQ(kernels::active_isa(), best);
  }
  // The binary on the generic path gives the same golden numbers.
  const auto fast = testing::run_dsv4("verify --model " + testing::golden_dir() + "/small-fp8 --chunk 7");
  const auto generic =
      testing::run_dsv4("verify --model " + testing::golden_dir() + "/small-fp8 --chunk 7", "DSV4_ISA=generic");
  ASSERT_EQ(fast.code, 0) << fast.output;
  ASSERT_EQ(generic.code, 0) << generic.output;
  auto table = [](const std::string& out) { return out.substr(out.find("  tensor")); };
  EXPECT_EQ(table(fast.output), table(generic.output));
  EXPECT_NE(fast.output.find(std::string("kernels ") + kernels::isa_name(best)), std::string::npos) << fast.output;
  EXPECT_NE(generic.output.find("kernels generic"), std::string::npos) << generic.output;
}

}  // namespace
}  // namespace dsv4
