// W8A8: the generic int8 kernels (the oracle of test_ops.cc) compute the
// exact integer sums, and
// `dsv4 convert --to w8a8` turns small-fp8 into a compressed-tensors
// checkpoint that passes verify within the W8A8 bounds, resumably.
#include <gtest/gtest.h>

#include <regex>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "checkpoint/safetensors.h"
#include "temp_dir.h"
#include "test_util.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

const kernels::Kernels& oracle() {
  return kernels::kernels_for(kernels::Isa::kGeneric, kernels::Numerics::kExact);
}

TEST(W8a8Kernels, RowQuantizationIsSymmetricPerRow) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 2.0f);
  const int64_t m = 3, k = 70;
  std::vector<float> x(m * k);
  for (auto& v : x) v = d(rng);
  std::fill_n(x.begin() + 2 * k, k, 0.0f);  // an all-zero row
  std::vector<uint8_t> biased(m * kernels::int8_padded_k(k));
  std::vector<float> scales(m);
  oracle().quantize_rows_int8(x.data(), m, k, biased.data(), scales.data());
  for (int64_t i = 0; i < m; ++i) {
    int max_q = 0;
    for (int64_t t = 0; t < kernels::int8_padded_k(k); ++t) {
      const int q = static_cast<int>(biased[i * kernels::int8_padded_k(k) + t]) - 128;
      ASSERT_LE(std::abs(q), 127);
      if (t >= k) {
        EXPECT_EQ(q, 0) << "padding";
        continue;
      }
      max_q = std::max(max_q, std::abs(q));
      EXPECT_LE(std::fabs(q * scales[i] - x[i * k + t]), scales[i] * 0.5f + 1e-6f);
    }
    EXPECT_EQ(max_q, i == 2 ? 0 : 127) << "row " << i;
  }
}

TEST(W8a8Kernels, GenericEqualsTheIntegerSum) {
  struct Shape {
    int64_t m, n, k;
  };
  std::mt19937 rng(9);
  for (const Shape& s : {Shape{1, 16, 64}, Shape{3, 21, 70}, Shape{6, 70, 257}, Shape{5, 130, 512}, Shape{1, 5, 3}}) {
    std::vector<int8_t> w(s.n * s.k);
    for (auto& v : w) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    std::vector<float> channel(s.n), x(s.m * s.k);
    for (auto& c : channel) c = std::ldexp(1.0f + (rng() % 100) / 100.0f, -9);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : x) v = d(rng);
    const int64_t kp = kernels::int8_padded_k(s.k);
    std::vector<uint8_t> biased(s.m * kp);
    std::vector<float> row_scales(s.m);
    oracle().quantize_rows_int8(x.data(), s.m, s.k, biased.data(), row_scales.data());
    std::vector<float> want(s.m * s.n);
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        int64_t acc = 0;
        for (int64_t t = 0; t < s.k; ++t) acc += (static_cast<int>(biased[i * kp + t]) - 128) * w[j * s.k + t];
        want[i * s.n + j] = static_cast<float>(acc) * row_scales[i] * channel[j];
      }
    std::vector<uint8_t> codes(kernels::int8_code_bytes(s.n, s.k)), extra(kernels::int8_panel_extra_bytes(s.n));
    kernels::pack_int8_panels(w.data(), channel.data(), s.n, s.k, codes.data(), extra.data());
    const kernels::Int8Panels q{codes.data(), extra.data()};
    const int64_t panels = (s.n + kernels::kPanel - 1) / kernels::kPanel;
    std::vector<float> got(s.m * s.n, -1.0f);
    oracle().matmul_int8(biased.data(), row_scales.data(), s.m, s.k, q, s.n, 0, panels, got.data(), s.n);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * want.size()))
        << "m " << s.m << " n " << s.n << " k " << s.k;
  }
}

class ConvertW8a8 : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = tmp_.file("w8a8");
  }
  std::string convert() {
    auto r = testing::run_dsv4("convert --to w8a8 --model " + testing::golden_dir() + "/small-fp8 --out " + out_);
    EXPECT_EQ(r.code, 0) << r.output;
    return r.output;
  }
  testing::CliResult verify() {
    return testing::run_dsv4("verify --model " + out_ + " --golden " + testing::golden_dir() +
                             "/small-fp8/golden.safetensors --chunk 7");
  }
  testing::TempDir tmp_{"dsv4_w8a8"};
  std::string out_;
};

// tests/README.md's W8A8 bounds (measured against the FP8 reference), here
// apart from the code under test: each error verify prints is checked.
double w8a8_bound(const std::string& tensor) {
  if (tensor == "layer_out.0") return 0.05;
  if (tensor.rfind("layer_out.", 0) == 0 || tensor == "final_hidden") return 0.2;
  if (tensor == "prefill_logits") return 0.15;
  if (tensor == "decode_logits") return 0.2;
  if (tensor == "mtp_logits") return 0.15;
  return -1;
}

TEST_F(ConvertW8a8, SmallFp8PassesVerifyWithinTheW8a8Bounds) {
  convert();
  const auto v = verify();
  ASSERT_EQ(v.code, 0) << v.output;
  EXPECT_NE(v.output.find("weights W8A8"), std::string::npos) << v.output;
  EXPECT_NE(v.output.find("10 of the golden's 10 output tensors compared\nPASS"), std::string::npos) << v.output;
  std::smatch m;
  int bounded = 0;
  const std::regex line(R"(\n  (\S+) +([0-9.e+-]+) +\S+ +(ok|FAIL|\(info\)))");
  for (auto it = std::sregex_iterator(v.output.begin(), v.output.end(), line); it != std::sregex_iterator(); ++it) {
    const std::string tensor = (*it)[1];
    const double bound = w8a8_bound(tensor);
    ASSERT_GE(bound, 0) << tensor << " has no bound in tests/README.md";
    EXPECT_LE(std::stod((*it)[2]), bound) << tensor;
    EXPECT_EQ((*it)[3], "ok") << tensor << ": verify bounds it too";
    ++bounded;
  }
  EXPECT_EQ(bounded, 10) << v.output;
  ASSERT_TRUE(std::regex_search(v.output, m, std::regex(R"(decode argmax +(\d+)/(\d+) match)"))) << v.output;
  EXPECT_GE(std::stod(m[1]) / std::stod(m[2]), 0.70) << v.output;

  // The compressed-tensors layout: int8 weights with [out, 1] f32 scales;
  // wo_a (used on an unrounded input) stays FP8 and is listed as ignored.
  auto shard = SafetensorsFile::open(out_ + "/model.safetensors");
  ASSERT_TRUE(shard.ok()) << shard.status().message();
  const TensorInfo* w = (*shard)->find("layers.0.attn.wq_a.weight");
  const TensorInfo* s = (*shard)->find("layers.0.attn.wq_a.weight_scale");
  ASSERT_TRUE(w && s);
  EXPECT_EQ(w->dtype, DType::kI8);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(s->dtype, DType::kF32);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{128, 1}));
  EXPECT_EQ((*shard)->find("layers.0.attn.wq_a.scale"), nullptr);
  const TensorInfo* expert = (*shard)->find("layers.0.ffn.experts.3.w2.weight");
  ASSERT_TRUE(expert);
  EXPECT_EQ(expert->shape, (std::vector<int64_t>{256, 128})) << "FP4 pairs unpacked to one int8 per weight";
  const TensorInfo* wo_a = (*shard)->find("layers.0.attn.wo_a.weight");
  ASSERT_TRUE(wo_a);
  EXPECT_EQ(wo_a->dtype, DType::kF8E4M3);
  std::ifstream in(out_ + "/config.json");
  const auto config = nlohmann::json::parse(in);
  EXPECT_EQ(config["quantization_config"]["quant_method"], "compressed-tensors");
  EXPECT_EQ(config["quantization_config"]["config_groups"]["group_0"]["input_activations"]["strategy"], "token");
  const auto& ignored = config["quantization_config"]["ignore"];
  EXPECT_NE(std::find(ignored.begin(), ignored.end(), "layers.0.attn.wo_a"), ignored.end());
}

TEST_F(ConvertW8a8, AnInterruptedRunResumesAndWritesTheSameBytes) {
  convert();
  const std::string shard = out_ + "/model.safetensors";
  std::ifstream first_in(shard, std::ios::binary);
  const std::string first((std::istreambuf_iterator<char>(first_in)), std::istreambuf_iterator<char>());
  // A second run keeps every complete shard.
  EXPECT_NE(convert().find("0 shards written, 2 kept"), std::string::npos);
  // A shard cut short (a run killed mid-write leaves only a .tmp, but a
  // damaged file must not be trusted either) is written again.
  fs::resize_file(shard, first.size() / 2);
  const std::string again = convert();
  EXPECT_NE(again.find("1 shards written, 1 kept"), std::string::npos) << again;
  std::ifstream second_in(shard, std::ios::binary);
  const std::string second((std::istreambuf_iterator<char>(second_in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(first == second) << "the resumed shard differs from the first conversion";
  EXPECT_EQ(verify().code, 0);
}

// Broken W8A8 and FP8 scales are load errors that name the tensor.
TEST_F(ConvertW8a8, BrokenScalesAreClearLoadErrors) {
  convert();
  const std::string shard = out_ + "/model.safetensors";
  const std::string golden = " --golden " + testing::golden_dir() + "/small-fp8/golden.safetensors";
  testing::rewrite_safetensors(shard, [](const std::string& name, DType*, std::vector<int64_t>* shape,
                                         std::vector<uint8_t>* bytes) {
    if (name == "layers.1.attn.wq_b.weight_scale") {  // one scale short
      shape->at(0) -= 1;
      bytes->resize(bytes->size() - 4);
    }
    return true;
  });
  auto r = testing::run_dsv4("verify --model " + out_ + golden);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("layers.1.attn.wq_b.weight_scale"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("one scale per output channel"), std::string::npos) << r.output;

  fs::remove(shard);
  convert();
  testing::rewrite_safetensors(shard, [](const std::string& name, DType*, std::vector<int64_t>*,
                                         std::vector<uint8_t>* bytes) {
    if (name == "layers.0.attn.wq_a.weight_scale") {
      const float negative = -1.0f;
      std::memcpy(bytes->data() + 4 * 3, &negative, 4);
    }
    return true;
  });
  r = testing::run_dsv4("verify --model " + out_ + golden);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("layers.0.attn.wq_a.weight_scale"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not a finite non-negative scale"), std::string::npos) << r.output;

  // An FP8 block scale of 2^127 (the kernels add scales to exponents).
  fs::remove(shard);
  convert();
  testing::rewrite_safetensors(shard, [](const std::string& name, DType*, std::vector<int64_t>*,
                                         std::vector<uint8_t>* bytes) {
    if (name == "layers.0.attn.wo_a.scale") (*bytes)[0] = 254;
    return true;
  });
  r = testing::run_dsv4("verify --model " + out_ + golden);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("layers.0.attn.wo_a.scale"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("outside 2^-117..2^118"), std::string::npos) << r.output;
}

TEST_F(ConvertW8a8, BadArgumentsAreClearErrors) {
  auto r = testing::run_dsv4("convert --to w4a16 --model " + testing::golden_dir() + "/small-fp8 --out " + out_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--to w4a16 is not supported"), std::string::npos) << r.output;
  r = testing::run_dsv4("convert --to w8a8 --model /nonexistent/model --out " + out_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("/nonexistent/model"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dsv4
