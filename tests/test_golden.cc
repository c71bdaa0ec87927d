// Every golden case of ../shared/golden through the golden protocol, whole
// and chunked. Each tensor is its own assertion so a regression names the
// layer where it starts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "model/deepseek_v4.h"
#include "model/golden_verify.h"
#include "runtime/expert_parallel_verify.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using testing::golden_dir;

const DeepseekV4& model_for(const std::string& name) { return testing::golden_model(name); }

struct GoldenParam {
  std::string name;
  int chunk;
};

void PrintTo(const GoldenParam& p, std::ostream* os) { *os << p.name << " chunk " << p.chunk; }

class Golden : public ::testing::TestWithParam<GoldenParam> {};

TEST_P(Golden, MatchesReference) {
  const auto& p = GetParam();
  ASSERT_TRUE(std::filesystem::exists(golden_dir() + "/" + p.name + "/golden.safetensors"))
      << "golden case missing: " << golden_dir() << "/" << p.name;
  const DeepseekV4& model = model_for(p.name);
  VerifyOptions opt;
  opt.golden_path = golden_dir() + "/" + p.name + "/golden.safetensors";
  opt.chunk = p.chunk;
  opt.quantized = model_is_quantized(model);
  auto report = verify_golden(model, opt);
  ASSERT_TRUE(report.ok()) << report.status().message();
  for (const auto& t : report->tensors) {
    if (t.bound >= 0) {
      EXPECT_LE(t.rel_l2, t.bound) << p.name << " chunk " << p.chunk << ": " << t.name;
    }
    // Stronger than the README asks: the forward follows the reference's
    // float operations one by one (docs/model-notes.md), so every tensor,
    // FP8 case included, is bit-identical however the prompt is chunked.
    EXPECT_EQ(t.rel_l2, 0.0) << p.name << " chunk " << p.chunk << ": " << t.name << " is not bit-exact";
  }
  EXPECT_GE(report->greedy_match, std::ceil(report->greedy_required * report->greedy_total - 1e-9))
      << p.name << " chunk " << p.chunk << ": greedy tokens " << report->greedy_match << "/" << report->greedy_total;
}

std::vector<GoldenParam> params() {
  std::vector<GoldenParam> out;
  for (const char* name : {"tiny-a", "small-real", "small-fp8"})
    for (int chunk : {0, 1, 7, 64}) out.push_back({name, chunk});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, Golden, ::testing::ValuesIn(params()), [](const auto& info) {
  std::string n = info.param.name + "_chunk" + std::to_string(info.param.chunk);
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
});

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// Expert parallelism over threads: every rank loads only its experts and the
// golden numbers stay exact.
struct ExpertParallelParam {
  std::string name;
  int ep;
  int chunk;
};

void PrintTo(const ExpertParallelParam& p, std::ostream* os) { *os << p.name << " ep " << p.ep << " chunk " << p.chunk; }

class GoldenExpertParallel : public ::testing::TestWithParam<ExpertParallelParam> {};

TEST_P(GoldenExpertParallel, MatchesReferenceBitForBit) {
  const auto& p = GetParam();
  VerifyOptions opt;
  opt.golden_path = testing::golden_dir() + "/" + p.name + "/golden.safetensors";
  opt.chunk = p.chunk;
  opt.quantized = model_is_quantized(testing::golden_model(p.name));
  auto run = verify_golden_expert_parallel(testing::golden_dir() + "/" + p.name, opt, p.ep);
  ASSERT_TRUE(run.ok()) << run.status().message();
  for (const auto& t : run->report.tensors) {
    if (t.bound >= 0) {
      EXPECT_LE(t.rel_l2, t.bound) << t.name;
    }
    EXPECT_EQ(t.rel_l2, 0.0) << t.name;
  }
  EXPECT_EQ(run->report.greedy_match, run->report.greedy_total);
  EXPECT_EQ(run->expert_bytes_per_rank * p.ep, run->expert_bytes_total) << "each rank holds 1/ep of the experts";
  EXPECT_GT(run->expert_bytes_per_rank, 0);
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenExpertParallel,
                         ::testing::Values(ExpertParallelParam{"tiny-a", 2, 0}, ExpertParallelParam{"tiny-a", 8, 7},
                                           ExpertParallelParam{"small-real", 4, 64},
                                           ExpertParallelParam{"small-fp8", 2, 1}),
                         [](const auto& info) {
                           std::string n = info.param.name + "_ep" + std::to_string(info.param.ep) + "_chunk" +
                                           std::to_string(info.param.chunk);
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(GoldenExpertParallelErrors, EpMustDivideTheExperts) {
  VerifyOptions opt;
  opt.golden_path = testing::golden_dir() + "/tiny-a/golden.safetensors";
  auto run = verify_golden_expert_parallel(testing::golden_dir() + "/tiny-a", opt, 3);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("--ep 3 must divide the 8 routed experts"), std::string::npos);
}

}  // namespace
}  // namespace dsv4
