// The gate closes: `dsv4 verify` prints FAIL and exits 1 for a model with
// one weight changed and for a golden with an output tensor missing, on one
// rank, on tensor-parallel ranks (threads) and over MPI processes, in exact
// and fast numerics. The intact copy of the same case passes through the
// same commands, so what fails is the change and not the harness.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "golden_v41_case.h"
#include "temp_dir.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using testing::CliResult;
using testing::golden_dir;
using testing::run_command;
using testing::run_dsv4;
using testing::TempDir;

constexpr const char* kCase = "tiny-a";

// A copy of the case's files in `dir`.
void copy_case(const std::string& dir) {
  for (const char* f : {"config.json", "model.safetensors", "golden.safetensors", "case.json"})
    std::filesystem::copy_file(golden_dir() + "/" + kCase + "/" + f, dir + "/" + f);
}

// Doubles the first nonzero value of BF16 tensor `name` in the safetensors
// file at `path` (its exponent plus one).
void double_one_bf16_value(const std::string& path, const std::string& name) {
  bool doubled = false;
  testing::rewrite_safetensors(path, [&](const std::string& n, DType* dtype, std::vector<int64_t>*,
                                         std::vector<uint8_t>* bytes) {
    if (n != name || *dtype != DType::kBF16) return true;
    for (size_t at = 0; at + 1 < bytes->size() && !doubled; at += 2) {
      uint16_t v;
      std::memcpy(&v, bytes->data() + at, 2);
      const int exponent = (v >> 7) & 0xff;
      if (exponent == 0 || exponent >= 0xfe) continue;
      v = static_cast<uint16_t>(v + 0x80);
      std::memcpy(bytes->data() + at, &v, 2);
      doubled = true;
    }
    return true;
  });
  ASSERT_TRUE(doubled) << name << " is not a BF16 tensor with a value to double";
}

// The golden at `path` without tensor `name`.
void drop_tensor(const std::string& path, const std::string& name) {
  bool dropped = false;
  testing::rewrite_safetensors(path, [&](const std::string& n, DType*, std::vector<int64_t>*, std::vector<uint8_t>*) {
    dropped |= n == name;
    return n != name;
  });
  ASSERT_TRUE(dropped) << name;
}

// The report's line for `tensor` (empty when there is none).
std::string line_of(const std::string& output, const std::string& tensor) {
  const size_t at = output.find("  " + tensor + " ");
  if (at == std::string::npos) return "";
  return output.substr(at, output.find('\n', at) - at);
}

std::string mpiexec(int ranks) {
  return std::string(DSV4_MPIEXEC) + " --allow-run-as-root --oversubscribe -n " + std::to_string(ranks) +
         " -x DSV4_NUM_THREADS=1 " + DSV4_BINARY + " ";
}

class VerifyGate : public ::testing::Test {
 protected:
  void SetUp() override {
    copy_case(intact_.path());
    copy_case(perturbed_.path());
    copy_case(cut_.path());
    // Layer 1's query projection: every tensor from layer_out.1 on moves.
    double_one_bf16_value(perturbed_.file("model.safetensors"), "layers.1.attn.wq_a.weight");
    drop_tensor(cut_.file("golden.safetensors"), "layer_out.2");
  }
  TempDir intact_{"dsv4_gate_intact"}, perturbed_{"dsv4_gate_perturbed"}, cut_{"dsv4_gate_cut"};
};

void expect_perturbed_fails(const CliResult& r, const std::string& how) {
  EXPECT_EQ(r.code, 1) << how << "\n" << r.output;
  EXPECT_NE(r.output.find("\nFAIL\n"), std::string::npos) << how << "\n" << r.output;
  EXPECT_NE(line_of(r.output, "layer_out.0").find(" ok"), std::string::npos) << how << ": before the change\n" << r.output;
  for (const char* t : {"layer_out.1", "final_hidden", "prefill_logits"})
    EXPECT_NE(line_of(r.output, t).find("FAIL"), std::string::npos) << how << ": " << t << "\n" << r.output;
}

void expect_cut_fails(const CliResult& r, const std::string& how) {
  EXPECT_EQ(r.code, 1) << how << "\n" << r.output;
  EXPECT_NE(r.output.find("\nFAIL\n"), std::string::npos) << how << "\n" << r.output;
  EXPECT_NE(line_of(r.output, "layer_out.2").find("FAIL (missing from the golden)"), std::string::npos)
      << how << "\n" << r.output;
  EXPECT_NE(r.output.find("7 of the golden's 7 output tensors compared"), std::string::npos) << how << "\n" << r.output;
}

TEST_F(VerifyGate, AChangedWeightOrAMissingGoldenTensorFailsOnOneRank) {
  const CliResult intact = run_dsv4("verify --model " + intact_.path());
  EXPECT_EQ(intact.code, 0) << intact.output;
  EXPECT_NE(intact.output.find("8 of the golden's 8 output tensors compared\nPASS\n"), std::string::npos)
      << intact.output;
  expect_perturbed_fails(run_dsv4("verify --model " + perturbed_.path()), "one rank");
  expect_cut_fails(run_dsv4("verify --model " + cut_.path()), "one rank");
}

TEST_F(VerifyGate, AChangedWeightFailsInFastNumericsToo) {
  const CliResult intact = run_dsv4("verify --numerics fast --model " + intact_.path());
  EXPECT_EQ(intact.code, 0) << intact.output;
  const CliResult r = run_dsv4("verify --numerics fast --model " + perturbed_.path());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("\nFAIL\n"), std::string::npos) << r.output;
  EXPECT_NE(line_of(r.output, "prefill_logits").find("FAIL"), std::string::npos) << r.output;
}

TEST_F(VerifyGate, AChangedWeightOrAMissingGoldenTensorFailsOnTensorParallelRanks) {
  const std::string layout = "verify --tp 2 --dp 2 --chunk 7 --model ";
  const CliResult intact = run_dsv4(layout + intact_.path());
  EXPECT_EQ(intact.code, 0) << intact.output;
  expect_perturbed_fails(run_dsv4(layout + perturbed_.path()), "TP2 x DP2 threads");
  expect_cut_fails(run_dsv4(layout + cut_.path()), "TP2 x DP2 threads");
}

// Over MPI processes (named Mpi*: OpenMPI's start-up trips LeakSanitizer,
// so the sanitized stage leaves it to the README's run).
TEST_F(VerifyGate, MpiAChangedWeightOrAMissingGoldenTensorFailsOverMpiProcesses) {
  const std::string layout = mpiexec(2) + "verify --dist mpi --tp 2 --model ";
  const CliResult intact = run_command(layout + intact_.path());
  EXPECT_EQ(intact.code, 0) << intact.output;
  expect_perturbed_fails(run_command(layout + perturbed_.path()), "TP2 over 2 MPI processes");
  expect_cut_fails(run_command(layout + cut_.path()), "TP2 over 2 MPI processes");
}

// DeepSeek-V4.1 over four MPI processes (TP2 x DP2, EP4), every data-
// parallel group running every prompt: the case passes, and a doubled
// query-norm weight of layer 1 fails it from layer_out.1 on with the
// job's exit code.
TEST(MpiVerifyV41, PassesAndAChangedWeightFailsOnTensorAndDataParallelProcesses) {
  const TempDir intact("dsv4_gate_v41"), perturbed("dsv4_gate_v41_perturbed");
  for (const TempDir* d : {&intact, &perturbed})
    for (const char* f : {"config.json", "model.safetensors", "golden.safetensors", "case.json", "tokenizer.json"})
      std::filesystem::copy_file(golden_v41_dir("v41-fp8") + "/" + f, d->file(f));
  double_one_bf16_value(perturbed.file("model.safetensors"), "layers.1.attn.q_norm.weight");
  const std::string layout = mpiexec(4) + "verify --dist mpi --tp 2 --dp 2 --chunk 7 --model ";
  const CliResult ok = run_command(layout + intact.path());
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(ok.output.find("over 4 MPI ranks (4 ranks: TP2 x DP2, EP4)"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("15 of the golden's 15 output tensors compared\nPASS\n"), std::string::npos) << ok.output;
  const CliResult bad = run_command(layout + perturbed.path());
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(line_of(bad.output, "layer_out.0").find(" ok"), std::string::npos) << bad.output;
  for (const char* t : {"layer_out.1", "main_hidden", "prefill_logits"})
    EXPECT_NE(line_of(bad.output, t).find("FAIL"), std::string::npos) << t << "\n" << bad.output;
}

}  // namespace
}  // namespace dsv4
