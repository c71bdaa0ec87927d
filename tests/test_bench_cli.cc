// dsv4 bench through the binary.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "checkpoint/safetensors.h"
#include "temp_dir.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using testing::run_dsv4;

// dsv4 bench (throughput): incremental rows, the machine's limits and the
// roofline ratio, and the same rows as CSV.
TEST(BenchCli, ThroughputRowsMachineLimitsAndCsv) {
  const testing::TempDir tmp;
  const std::string csv = tmp.file("bench.csv");
  const auto r = run_dsv4("bench --ctx 64,192 --batch 1,3 --gen 4 --csv " + csv);
  ASSERT_EQ(r.code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m,
      std::regex(R"(memory read ([0-9.]+) GB/s; GEMM kernel peak \(FP8 panels, BF16-pair inputs: what prefill's linears run\) )"
                 R"(([0-9.]+) GFLOP/s exact ([0-9.]+) GFLOP/s fast, f32 panels ([0-9.]+) GFLOP/s)")))
      << r.output;
  for (int i = 1; i <= 4; ++i) EXPECT_GT(std::stod(m[i]), 0.1);
  // Both numerics side by side: prefill rows against the GEMM peak, decode at
  // batch 1 against the roofline; decode rows time the steps after one warm-up.
  const std::string num = R"(\s+[0-9.]+)", pct = R"(\s+[0-9.]+%)", ratio = R"(\s+[0-9.]+x)";
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(prefill\s+1\s+64-192\s+128)" + num + pct + num + pct + ratio)))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(decode\s+3\s+192-197\s+12)" + num + num + ratio))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(decode\s+1\s+64-69\s+4)" + num + pct + num + pct + ratio)))
      << r.output;
  for (const char* mode : {"exact", "fast"}) {
    const std::string md(mode);
    EXPECT_TRUE(std::regex_search(
        r.output, std::regex(md + R"(: decode batch 3 at context 192: [0-9.]+x the tokens/s of batch 1)")))
        << r.output;
    EXPECT_TRUE(
        std::regex_search(r.output, std::regex(md + R"(: decode at context 192: [0-9.]+x the tokens/s at context 64)")))
        << r.output;
    // The per-phase breakdown of each prefill row's last chunk (the longest
    // context it reached) and of a decode step: shares of the step that add
    // up to at most 100%.
    for (const char* step : {"prefill 0-64", "prefill 64-192", "decode batch 1", "decode batch 3"}) {
      ASSERT_TRUE(std::regex_search(r.output, m, std::regex("  " + md + " " + step + R"(\s+[0-9.]+ ms: ([^\n]*))")))
          << step << "\n" << r.output;
      const std::string shares = m[1];
      EXPECT_NE(shares.find("attention"), std::string::npos) << shares;
      EXPECT_NE(shares.find("experts"), std::string::npos) << shares;
      double total = 0;
      const std::regex share(R"(([0-9.]+)%)");
      for (auto it = std::sregex_iterator(shares.begin(), shares.end(), share); it != std::sregex_iterator(); ++it)
        total += std::stod((*it)[1]);
      EXPECT_GT(total, 50.0) << shares;
      EXPECT_LE(total, 100.5) << shares;
    }
  }
  // KV bytes per token for this model and the released ones, shrinking per
  // token as the context grows (the window ring and states are per request).
  for (const char* model : {"this model", "DeepSeek-V4-Flash", "DeepSeek-V4-Pro"}) {
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex(std::string(model) + R"(\s+([0-9]+)\s+([0-9]+)\s+([0-9]+)\n)")))
        << model << "\n" << r.output;
    EXPECT_GT(std::stod(m[1]), std::stod(m[2])) << model;
    EXPECT_GT(std::stod(m[2]), std::stod(m[3])) << model;
  }
  // The roofline per step: each row's bytes and FLOPs, its time at the
  // bandwidth and at the kernel peaks, the larger of the two, and the
  // share of it the row achieved.
  for (const char* mode : {"exact", "fast"}) {
    const std::string md(mode);
    const auto from = r.output.find("roofline per step, " + md);
    ASSERT_NE(from, std::string::npos) << r.output;
    // The table: its heading, then its lines, each indented.
    size_t end = r.output.find('\n', from);
    while (end != std::string::npos && r.output.compare(end + 1, 2, "  ") == 0) end = r.output.find('\n', end + 1);
    const std::string table = r.output.substr(from, end - from);
    const std::regex row(R"(\n  (prefill|decode)\s+([0-9]+)\s+([0-9]+)-[0-9]+)"
                         R"(\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+))"
                         R"(\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)%)");
    std::map<std::string, std::vector<double>> rows;  // "decode 3 192" -> its numbers
    for (auto it = std::sregex_iterator(table.begin(), table.end(), row); it != std::sregex_iterator(); ++it) {
      std::vector<double> v;
      for (int i = 4; i <= 16; ++i) v.push_back(std::stod((*it)[i]));
      rows[(*it)[1].str() + " " + (*it)[2].str() + " " + (*it)[3].str()] = v;
    }
    ASSERT_EQ(rows.size(), 6u) << table;  // 2 prefill rows, 2 contexts x 2 batch sizes
    for (const auto& [name, v] : rows) {
      // GB/s, weights MiB, KV MiB, GFLOP (FP8, FP4, BF16 panels, attention,
      // indexer), memory ms, flops ms, roof ms, step ms, share
      EXPECT_GT(v[0], 0.1) << name;
      EXPECT_GT(v[1], 0.0) << name;                          // weights streamed
      EXPECT_GT(v[2], 0.0) << name;                          // KV rows read
      EXPECT_GT(v[3] + v[4] + v[5], 0.0) << name;            // the linears, in their checkpoint's panels
      EXPECT_GT(v[6], 0.0) << name;                          // attention
      EXPECT_NEAR(v[10], std::max(v[8], v[9]), 0.0011 + 1e-3 * v[10]) << name;  // roofline: the larger time
      // (the times are printed to 0.001 ms)
      EXPECT_NEAR(v[12], 100.0 * v[10] / v[11], 0.06 + v[12] * (5e-4 / v[10] + 5e-4 / v[11])) << name;
    }
    // A batch of 3 reads the weights of more experts than one token (the
    // default model routes 2 of 8), and does 3 tokens' FLOPs.
    const auto& one = rows["decode 1 192"];
    const auto& three = rows["decode 3 192"];
    EXPECT_GT(three[1], one[1]) << table;
    EXPECT_NEAR(three[6], 3 * one[6], 1.1e-4 + 1e-3 * three[6]) << table;  // attention GFLOP
    const double linears_one = one[3] + one[4] + one[5], linears_three = three[3] + three[4] + three[5];
    EXPECT_NEAR(linears_three, 3 * linears_one, 3e-4 + 1e-3 * linears_three) << table;
    // A longer context reads more KV rows, and a token attends more slots.
    EXPECT_GT(rows["decode 1 192"][2], rows["decode 1 64"][2]) << table;
    EXPECT_GT(rows["prefill 1 64"][6] / 128, rows["prefill 1 0"][6] / 64) << table;
  }
  std::ifstream in(csv);
  std::string header, line;
  std::getline(in, header);
  EXPECT_EQ(header,
            "numerics,phase,batch,ctx_from,ctx_to,tokens,seconds,tok_s,mem_gbps,gemm_gflops,vs_limit,row_mem_gbps,"
            "roofline_seconds,of_roofline");
  int lines = 0;
  while (std::getline(in, line)) ++lines;
  EXPECT_EQ(lines, 12);  // per numerics: 2 prefill rows + 2 contexts x 2 batch sizes
  // --numerics picks one mode; the header says which.
  const auto one = run_dsv4("bench --ctx 64 --batch 1 --gen 2 --numerics exact");
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_NE(one.output.find("numerics exact,"), std::string::npos) << one.output;
  EXPECT_EQ(one.output.find("fast prefill"), std::string::npos) << one.output;
  const auto bad = run_dsv4("bench --ctx 64,x");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("--ctx needs positive lengths"), std::string::npos) << bad.output;
}

// dsv4 bench --serving on a model whose MTP block drafts well: every K row
// decodes the same tokens as K = 0 and some drafts are accepted; a prefix
// hit reuses the prompt's full blocks; the same rows as CSV.
TEST(BenchCli, ServingRowsSpeculationAndPrefixHits) {
  const testing::TempDir tmp;
  const std::string model = tmp.file("model"), csv = tmp.file("serving.csv");
  const auto made = run_dsv4("mkmodel --out " + model + " --mtp-copies-last-block");
  ASSERT_EQ(made.code, 0) << made.output;
  const auto r = run_dsv4("bench --serving --model " + model + " --ctx 512 --gen 16 --k 1,3 --csv " + csv);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\n  0   -\s+1\.00\s+[0-9.]+\s+1\.00x\s+-\n)"))) << r.output;
  for (const char* k : {"1", "3"}) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m,
                                  std::regex(std::string(R"(\n  )") + k +
                                             R"(\s+(\d+)/(\d+)\s+([0-9.]+)\s+[0-9.]+\s+[0-9.]+x\s+yes\n)")))
        << r.output;
    EXPECT_GT(std::stoi(m[1]), 0) << "K=" << k;
    EXPECT_LE(std::stoi(m[1]), std::stoi(m[2]));
    EXPECT_GT(std::stod(m[3]), 1.0);
  }
  // 512 tokens: the first 3 blocks of 128 come from the cache (a hit leaves
  // the last token to compute).
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex(R"(time to first token at 512 tokens: cold [0-9.]+ s \(0 cached\), prefix hit [0-9.]+ s \(384 cached\))")))
      << r.output;
  std::ifstream in(csv);
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(in, line))
    if (line[0] != '#') rows.push_back(line.substr(0, line.find(',', line.find(',') + 1)));
  EXPECT_EQ(rows, (std::vector<std::string>{"speculative,0", "speculative,1", "speculative,3", "ttft,512"}));
  const auto bad = run_dsv4("bench --serving --model " + model + " --k 8");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("--k needs draft counts from 1 to 7"), std::string::npos) << bad.output;
}

// On the trained default model the speculative rows decode its answers to
// held-out chat prompts: the MTP block's drafts are mostly kept, and the
// greedy tokens are plain decoding's.
TEST(BenchCli, ServingOnTheDefaultModelDecodesChatAnswers) {
  const auto r = run_dsv4("bench --serving --model embedded:default --ctx 512 --k 1,3");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("8 held-out chat prompts"), std::string::npos) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(\n  1\s+(\d+)/(\d+)\s+([0-9.]+)\s+[0-9.]+\s+[0-9.]+x\s+yes\n)")))
      << r.output;
  EXPECT_GT(2 * std::stoi(m[1]), std::stoi(m[2])) << "most of the MTP block's drafts are kept";
}

}  // namespace
// A DeepSeek-V4.1 checkpoint next to a DeepSeek-V4 one: decode at batch 1,
// each against its own roofline, in one run (one bandwidth for both).
TEST(BenchCli, V41DecodeNextToV4AgainstEachRoofline) {
  const std::string v41 = std::string(DSV4_GOLDEN_V41_DIR) + "/v41-fp8", v4 = testing::golden_dir() + "/small-fp8";
  const auto run = testing::run_dsv4("bench --model " + v41 + " --model " + v4 + " --ctx 40 --gen 2");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("decode at batch 1 after 40 prompt tokens (2 steps timed)"), std::string::npos) << run.output;
  // Two rows a model (exact, fast); each a rate and its share of the roofline.
  const std::regex row(R"((\S+) +(V4|V4\.1) +(exact|fast) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+)%)");
  int rows = 0, v41_rows = 0;
  for (std::sregex_iterator it(run.output.begin(), run.output.end(), row), end; it != end; ++it) {
    ++rows;
    v41_rows += (*it)[2] == "V4.1";
    EXPECT_GT(std::stod((*it)[7]), 0.0) << run.output;
    // tok/s over roofline tok/s is the share printed.
    EXPECT_NEAR(100.0 * std::stod((*it)[7]) / std::stod((*it)[6]), std::stod((*it)[8]), 0.1) << run.output;
  }
  EXPECT_EQ(rows, 4) << run.output;
  EXPECT_EQ(v41_rows, 2) << run.output;
  // What does not apply to a V4.1 run is refused by name.
  const auto serving = testing::run_dsv4("bench --serving --model " + v41);
  EXPECT_EQ(serving.code, 2);
  EXPECT_NE(serving.output.find("--serving"), std::string::npos) << serving.output;
}

// The roofline prices each linear at the peak of the kernel class that runs
// it: FP8 panels taking rounded inputs run BF16 dot products ("FP8 GF"),
// while wo_a, which the reference multiplies by its unrounded input, runs
// the f32-input FP8 kernel and is priced with the f32 multiply-adds.
TEST(BenchCli, FlopsOfEachLinearGoToTheKernelClassThatRunsIt) {
  const std::string model = testing::golden_dir() + "/small-fp8";
  auto file = SafetensorsFile::open(model + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  double dot_product_flops = 0, wo_a_flops = 0;  // a token's, the main layers' (not the MTP block's)
  for (const auto& [name, t] : (*file)->tensors()) {
    if (t.dtype != DType::kF8E4M3 || name.rfind("layers.", 0) != 0 || !ends_with(name, ".weight")) continue;
    ASSERT_EQ(t.shape.size(), 2u) << name;
    const double f = 2.0 * static_cast<double>(t.shape[0] * t.shape[1]);
    (ends_with(name, ".wo_a.weight") ? wo_a_flops : dot_product_flops) += f;
  }
  ASSERT_GT(wo_a_flops, 1e-3 * 1e9);  // well above the table's 0.1 MFLOP resolution
  const auto r = run_dsv4("bench --model " + model + " --ctx 64 --batch 1 --gen 1 --numerics exact");
  ASSERT_EQ(r.code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(\n  decode\s+1\s+64-[0-9]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+([0-9.]+))")))
      << r.output;
  EXPECT_NEAR(std::stod(m[1]), dot_product_flops / 1e9, 1e-4) << r.output;
}

namespace {

// The simulator end to end on the embedded model: two nodes of four cores,
// the ranks placed one a node, every weight byte read on its own node, the
// tokens those of an unsimulated run; each decode scenario's traced step
// listed; and malformed machines refused by name.
TEST(BenchCli, SimulatedMachineRunsTheRealForward) {
  const auto r = testing::run_dsv4("bench --simulate cores=8,nodes=2,bandwidth=100,job-us=5 --ctx 16 --gen 2 "
                                   "--batch 1,3 --prompt-len 64 --trace-step 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("2 NUMA nodes x 4 cores"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1: NUMA node 1, cores 4-7 (4 threads)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("a pool job (wake-up and join) costs 5.00 us here (given"), std::string::npos) << r.output;
  for (const char* row : {"decode batch 1 after 16 prompt tokens: 2 tokens measured; rank 0 of 2 (4 logical workers)",
                          "decode batch 3 after 16 prompt tokens: 6 tokens measured",
                          "prefill of a 64-token chunk: 64 tokens measured"})
    EXPECT_NE(r.output.find(row), std::string::npos) << row << "\n" << r.output;
  size_t at = 0;
  int scenarios = 0;
  while ((at = r.output.find("weight bytes read off the reading rank's node, all ranks: 0\n", at)) != std::string::npos)
    ++scenarios, ++at;
  EXPECT_EQ(scenarios, 3) << r.output;
  at = 0;
  int same = 0;
  while ((at = r.output.find("tokens identical to an unsimulated run", at)) != std::string::npos) ++same, ++at;
  EXPECT_EQ(same, 3) << r.output;
  at = 0;
  int traced = 0;
  while ((at = r.output.find("step 2, rank 0, in order", at)) != std::string::npos) ++traced, ++at;
  EXPECT_EQ(traced, 2) << r.output;  // the decode scenarios, not the prefill
  at = 0;
  int layers_alone = 0;
  while ((at = r.output.find("layers alone (every phase but embedding + head): projected ", at)) != std::string::npos)
    ++layers_alone, ++at;
  EXPECT_EQ(layers_alone, 2) << r.output;
  EXPECT_NE(r.output.find(" tiles "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 2 by phase: serial us / jobs' busiest us: "), std::string::npos) << r.output;
  const auto negative = testing::run_dsv4("bench --simulate cores=8 --trace-step -1");
  EXPECT_EQ(negative.code, 2) << negative.output;
  EXPECT_NE(negative.output.find("--trace-step of at least 0"), std::string::npos) << negative.output;

  for (const auto& [spec, says] : std::vector<std::pair<std::string, std::string>>{
           {"nodes=2", "needs cores=N"},
           {"cores=10,nodes=3", "do not split evenly over nodes=3"},
           {"cores=abc", "'cores=abc' is not one"},
           {"cores=8,sockets=2", "not 'sockets'"}}) {
    const auto bad = testing::run_dsv4("bench --simulate " + spec);
    EXPECT_EQ(bad.code, 2) << spec << "\n" << bad.output;
    EXPECT_NE(bad.output.find(says), std::string::npos) << spec << "\n" << bad.output;
  }
}

}  // namespace
}  // namespace dsv4
