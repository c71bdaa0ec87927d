// Every golden case of ../shared/golden through the golden protocol, whole
// and chunked. Each tensor is its own assertion so a regression names the
// layer where it starts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "model/deepseek_v4.h"
#include "tools/golden_verify.h"
#include "tools/parallel_verify.h"
#include "temp_dir.h"
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
  auto report = verify_golden(model, opt);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->compared(), testing::golden_f32_tensors(p.name)) << report->format();
  EXPECT_EQ(report->tensors.size(), static_cast<size_t>(report->compared())) << report->format();
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

// Fast numerics: within each case's bounds for any correct implementation
// (case.json), whole and chunked; and chunking changes no bit (the fast
// kernels order each row's sums by its own data only).
class GoldenFast : public ::testing::TestWithParam<GoldenParam> {};

TEST_P(GoldenFast, WithinTheBoundsOfAnyCorrectImplementation) {
  const auto& p = GetParam();
  const DeepseekV4& model = testing::golden_model(p.name, kernels::Numerics::kFast);
  VerifyOptions opt;
  opt.golden_path = golden_dir() + "/" + p.name + "/golden.safetensors";
  opt.chunk = p.chunk;
  auto bounds = GoldenBounds::other_implementations(opt.golden_path);
  ASSERT_TRUE(bounds.ok()) << bounds.status().message();
  opt.bounds = *bounds;
  auto report = verify_golden(model, opt);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_TRUE(report->pass()) << p.name << " chunk " << p.chunk << "\n" << report->format();
  EXPECT_EQ(report->compared(), testing::golden_f32_tensors(p.name)) << report->format();
  opt.chunk = 0;
  auto whole = verify_golden(model, opt);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  for (size_t i = 0; i < report->tensors.size(); ++i)
    EXPECT_EQ(report->tensors[i].rel_l2, whole->tensors[i].rel_l2)
        << p.name << " chunk " << p.chunk << ": " << report->tensors[i].name << " depends on the chunking";
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenFast, ::testing::ValuesIn(params()), [](const auto& info) {
  std::string n = info.param.name + "_chunk" + std::to_string(info.param.chunk);
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
});

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// The TP x DP x EP topology over threads: every rank loads only its share,
// each data-parallel group runs its share of the prompts (groups without
// one step along empty), and the golden numbers stay exact, with FlashComm1
// too (rows per step not divisible by TP included); in fast numerics they
// stay within the case's bounds for other correct implementations.
struct TopologyParam {
  std::string name;
  int tp, dp, ep;  // ep 0: every rank
  int chunk;
  int flashcomm_min = 0;  // 0: FlashComm1 off
  bool fast = false;      // fast numerics: within the case's bounds for other implementations
};

void PrintTo(const TopologyParam& p, std::ostream* os) {
  *os << p.name << " tp " << p.tp << " dp " << p.dp << " ep " << p.ep << " chunk " << p.chunk << " flashcomm1 "
      << p.flashcomm_min << (p.fast ? " fast" : "");
}

class GoldenParallel : public ::testing::TestWithParam<TopologyParam> {};

TEST_P(GoldenParallel, MatchesReference) {
  const auto& p = GetParam();
  VerifyOptions opt;
  opt.golden_path = testing::golden_dir() + "/" + p.name + "/golden.safetensors";
  opt.chunk = p.chunk;
  ParallelVerifyOptions par;
  par.topology = {p.tp, p.dp, p.ep};
  par.flashcomm = {p.flashcomm_min > 0, p.flashcomm_min};
  if (p.fast) {
    par.numerics = kernels::Numerics::kFast;
    auto bounds = GoldenBounds::other_implementations(opt.golden_path);
    ASSERT_TRUE(bounds.ok()) << bounds.status().message();
    opt.bounds = *bounds;
  }
  auto run = verify_golden_parallel(testing::golden_dir() + "/" + p.name, opt, par);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->report.compared(), testing::golden_f32_tensors(p.name)) << run->report.format();
  EXPECT_EQ(run->report.tensors.size(), static_cast<size_t>(run->report.compared())) << run->report.format();
  if (p.fast) {
    EXPECT_TRUE(run->report.pass()) << run->report.format();
  } else {
    for (const auto& t : run->report.tensors) {
      if (t.bound >= 0) {
        EXPECT_LE(t.rel_l2, t.bound) << t.name;
      }
      EXPECT_EQ(t.rel_l2, 0.0) << t.name;
    }
    EXPECT_EQ(run->report.greedy_match, run->report.greedy_total);
  }
  EXPECT_EQ(run->flashcomm_forwards > 0, p.flashcomm_min > 0) << "FlashComm1 ran in exactly the runs that enable it";
  if (p.tp > 1 || run->topology.ep > 1) {
    EXPECT_LT(run->weight_bytes_per_rank, run->weight_bytes_single) << "each rank holds a share of the weights";
  }
  std::printf("  %s %s%s: %.2f MiB of weights per rank, %.2f MiB on one rank; %lld FlashComm1 forwards\n",
              p.name.c_str(), run->topology.describe().c_str(), p.flashcomm_min ? " FlashComm1" : "",
              run->weight_bytes_per_rank / 1048576.0, run->weight_bytes_single / 1048576.0,
              static_cast<long long>(run->flashcomm_forwards));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GoldenParallel,
    ::testing::Values(
        // experts over data-parallel ranks (more groups than prompts: some
        // step along empty), tensor parallelism alone and with experts
        TopologyParam{"tiny-a", 1, 8, 8, 7}, TopologyParam{"small-real", 1, 4, 4, 64},
        TopologyParam{"small-fp8", 1, 2, 2, 1},
        TopologyParam{"tiny-a", 2, 1, 0, 7}, TopologyParam{"small-real", 2, 1, 0, 0},
        TopologyParam{"small-fp8", 2, 1, 0, 7}, TopologyParam{"small-fp8", 2, 1, 1, 0},
        // --dp 2 --ep 2
        TopologyParam{"tiny-a", 1, 2, 2, 0}, TopologyParam{"small-real", 1, 2, 2, 7},
        TopologyParam{"small-fp8", 1, 2, 2, 0},
        // the canonical shape: TP4 x DP4, EP16 (tiny-a has 8 experts: EP8)
        TopologyParam{"small-real", 4, 4, 16, 0}, TopologyParam{"small-fp8", 4, 4, 16, 7},
        TopologyParam{"tiny-a", 4, 4, 8, 7},
        // FlashComm1: 2 prompts x 7 tokens over TP4 (blocks 4,4,4,2), one
        // prompt of 7 over TP2, whole prompts
        TopologyParam{"small-fp8", 4, 1, 0, 7, 8}, TopologyParam{"small-real", 2, 2, 4, 7, 4},
        TopologyParam{"tiny-a", 2, 1, 0, 0, 16}, TopologyParam{"small-real", 4, 4, 16, 0, 2},
        // fast numerics in the layouts (tensor-parallel sums split differently;
        // with DP4 each group steps one prompt's 7 tokens, so FlashComm1 from 4)
        TopologyParam{"tiny-a", 2, 2, 4, 7, 0, true}, TopologyParam{"small-real", 4, 4, 16, 0, 2, true},
        TopologyParam{"small-fp8", 2, 1, 0, 7, 0, true}, TopologyParam{"small-fp8", 4, 4, 16, 7, 4, true}),
    [](const auto& info) {
      const TopologyParam& p = info.param;
      std::string n = p.name + "_tp" + std::to_string(p.tp) + "_dp" + std::to_string(p.dp) + "_ep" +
                      std::to_string(p.ep) + "_chunk" + std::to_string(p.chunk) +
                      (p.flashcomm_min ? "_flashcomm1_" + std::to_string(p.flashcomm_min) : "") +
                      (p.fast ? "_fast" : "");
      for (char& c : n)
        if (c == '-') c = '_';
      return n;
    });

// A golden the official reference computed states exact_numerics (exact
// numerics are then held to bit identity); one a second implementation
// computed (the trainer's, models/default) states only the bounds for
// another correct implementation, which then hold in both numerics.
TEST(GoldenBoundsRule, ExactNumericsAreBitExactOnlyForReferenceGoldens) {
  auto bounds_for = [](const std::string& case_json, kernels::Numerics numerics) {
    const testing::TempDir dir;
    std::ofstream(dir.file("case.json")) << case_json;
    auto b = GoldenBounds::for_run(dir.file("golden.safetensors"), numerics, false);
    EXPECT_TRUE(b.ok()) << b.status().message();
    return b.ok() ? *b : GoldenBounds();
  };
  const std::string reference = R"({"bounds": {"exact_numerics": "every tensor bit-identical",
      "other_correct_implementations": {"prefill_logits": 0.2, "decode_argmax_min": 0.85}}})";
  const std::string second = R"({"bounds": {"other_correct_implementations": {"prefill_logits": 0.05, "decode_argmax_min": 0.9}}})";
  const GoldenBounds exact_ref = bounds_for(reference, kernels::Numerics::kExact);
  EXPECT_EQ(exact_ref.bound("prefill_logits"), 0.0);
  EXPECT_TRUE(exact_ref.greedy_identical);
  EXPECT_EQ(bounds_for(reference, kernels::Numerics::kFast).bound("prefill_logits"), 0.2);
  for (auto numerics : {kernels::Numerics::kExact, kernels::Numerics::kFast}) {
    const GoldenBounds b = bounds_for(second, numerics);
    EXPECT_EQ(b.bound("prefill_logits"), 0.05);
    EXPECT_FALSE(b.greedy_identical);
    EXPECT_EQ(b.decode_argmax_min, 0.9);
  }
}

TEST(GoldenParallelErrors, LayoutsThatDoNotFitTheModelAreRejected) {
  VerifyOptions opt;
  opt.golden_path = testing::golden_dir() + "/tiny-a/golden.safetensors";
  for (const auto& [topology, words] : std::vector<std::pair<TopologyOptions, std::string>>{
           {{1, 3, 3}, "--ep 3 must divide the 8 routed experts"},
           {{8, 1, 8}, "--tp 8 must divide the 4 attention heads"},
       }) {
    ParallelVerifyOptions par;
    par.topology = topology;
    auto run = verify_golden_parallel(testing::golden_dir() + "/tiny-a", opt, par);
    ASSERT_FALSE(run.ok()) << words;
    EXPECT_NE(run.status().message().find(words), std::string::npos) << run.status().message();
  }
}

}  // namespace
}  // namespace dsv4
