// The parallel layouts through the binary: verify on the canonical
// TP4 x DP4, EP16 with FlashComm1, run on TP2 x DP2 against one rank, bench
// --topology's report, and clear errors for layouts that do not fit.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "test_util.h"

namespace dsv4 {
namespace {

using testing::run_dsv4;

TEST(ParallelCli, VerifyOnTheCanonicalLayoutWithFlashComm1) {
  const auto r = run_dsv4("verify --model " + testing::golden_dir() +
                          "/small-fp8 --tp 4 --dp 4 --ep 16 --chunk 7 --enable-flashcomm1 "
                          "--flashcomm1-sp-min-token-num 4");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("16 ranks: TP4 x DP4, EP16, FlashComm1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("FAIL"), std::string::npos) << r.output;
}

TEST(ParallelCli, RunOnTp2Dp2PrintsWhatOneRankPrints) {
  const std::string args =
      "run --prompt 'Hello there' --prompt 'The quick brown fox' --prompt 'abc' --max-tokens 8 --temperature 0 "
      "--ignore-eos --kv-cache-memory 256M";
  // The generated text: the lines tagged [i].
  auto texts = [](const std::string& out) {
    std::istringstream in(out);
    std::string all;
    for (std::string line; std::getline(in, line);)
      if (std::regex_search(line, std::regex(R"(^\[[0-9]+\] )"))) all += line + "\n";
    return all;
  };
  const auto one = run_dsv4(args);
  const auto four = run_dsv4(args + " --tp 2 --dp 2");
  ASSERT_EQ(one.code, 0) << one.output;
  ASSERT_EQ(four.code, 0) << four.output;
  EXPECT_NE(four.output.find("on 4 ranks: TP2 x DP2, EP4"), std::string::npos) << four.output;
  EXPECT_EQ(texts(four.output), texts(one.output));
  EXPECT_NE(texts(one.output).find("[2] "), std::string::npos) << one.output;
}

TEST(ParallelCli, BenchTopologyReportsWeightsAndTraffic) {
  const auto r = run_dsv4("bench --topology --tp 2 --dp 2 --prompt-len 64");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("4 ranks: TP2 x DP2, EP4"), std::string::npos) << r.output;
  // Every rank holds well under one rank's weights.
  std::smatch m;
  std::string text = r.output;
  int ranks = 0;
  const std::regex row(R"(\n\s+(\d+)\s+\d+\s+\d+\s+\d+\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)x\s+([0-9.]+)x)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), row); it != std::sregex_iterator(); ++it) {
    ++ranks;
    EXPECT_LT(std::stod((*it)[5]), 0.6) << (*it)[0];
    EXPECT_LT(std::stod((*it)[4]), 1.5) << (*it)[0];
  }
  EXPECT_EQ(ranks, 4) << r.output;
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(FlashComm1 off\s+([0-9.]+) MiB\s+\d+\s+([0-9.]+) MiB)")))
      << r.output;
  EXPECT_GT(std::stod(m[1]), 0.0);
  EXPECT_GT(std::stod(m[2]), 0.0);
  EXPECT_NE(r.output.find("FlashComm1 on (>= 64)"), std::string::npos) << r.output;
}

TEST(ParallelCli, LayoutsThatDoNotFitAreClearErrors) {
  auto r = run_dsv4("run --prompt hi --tp 3 --ep 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--tp 3 must divide the 4 attention heads"), std::string::npos) << r.output;
  r = run_dsv4("serve --tp 2 --dp 2 --ep 3 --port 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--ep 3 must divide the 4 ranks"), std::string::npos) << r.output;
  r = run_dsv4("verify --model " + testing::golden_dir() + "/tiny-a --tp 8");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("must divide"), std::string::npos) << r.output;
  r = run_dsv4("serve --dist tcp");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--dist must be local or mpi"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dsv4
