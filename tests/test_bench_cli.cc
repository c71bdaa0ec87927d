// dsv4 bench through the binary.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>

#include "test_util.h"

namespace dsv4 {
namespace {

using testing::run_dsv4;

// dsv4 bench (throughput): incremental rows, the machine's limits and the
// roofline ratio, and the same rows as CSV.
TEST(BenchCli, ThroughputRowsMachineLimitsAndCsv) {
  const std::string csv = ::testing::TempDir() + "/dsv4_bench.csv";
  const auto r = run_dsv4("bench --ctx 64,192 --batch 1,3 --gen 4 --csv " + csv);
  ASSERT_EQ(r.code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m,
      std::regex(R"(memory read ([0-9.]+) GB/s; GEMM kernel peak ([0-9.]+) GFLOP/s \(FP8/FP4 panels, BF16 dot\), )"
                 R"(([0-9.]+) GFLOP/s \(f32 panels\))")))
      << r.output;
  EXPECT_GT(std::stod(m[1]), 0.1);
  EXPECT_GT(std::stod(m[2]), 0.1);
  EXPECT_GT(std::stod(m[3]), 0.1);
  // Prefill rows against the GEMM peak, decode at batch 1 against the
  // roofline; decode rows time the steps after one warm-up step.
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(prefill\s+1\s+64-192\s+128\s+[0-9.]+\s+[0-9.]+%)")))
      << r.output;
  EXPECT_NE(r.output.find("decode        3        192-197         12"), std::string::npos) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(decode\s+1\s+64-69\s+4\s+[0-9.]+\s+[0-9.]+%)"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(decode batch 3 at context 192: [0-9.]+x the tokens/s of batch 1)")))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(decode at context 192: [0-9.]+x the tokens/s at context 64)")))
      << r.output;
  std::ifstream in(csv);
  std::string header, line;
  std::getline(in, header);
  EXPECT_EQ(header, "phase,batch,ctx_from,ctx_to,tokens,seconds,tok_s,mem_gbps,gemm_gflops,vs_limit");
  int lines = 0;
  while (std::getline(in, line)) ++lines;
  EXPECT_EQ(lines, 6);  // 2 prefill rows + 2 contexts x 2 batch sizes
  const auto bad = run_dsv4("bench --ctx 64,x");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("--ctx needs positive lengths"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace dsv4
