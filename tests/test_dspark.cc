// The DSpark drafter against ../shared/golden/DSPARK.md: its config (stages
// counted from compress_ratios), and both protocols on dspark-tiny (BF16)
// and dspark-fp8 (the released formats) in exact and fast numerics, whole
// and chunked prefill. In exact numerics the drafter fed the golden taps is
// bit-identical to the reference.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "checkpoint/config_json.h"
#include "model/deepseek_v4.h"
#include "test_util.h"
#include "tools/dspark_verify.h"

namespace dsv4 {
namespace {

using testing::golden_dir;
using testing::golden_model;

TEST(DSpark, StagesAreCountedFromCompressRatios) {
  auto c = load_model_config(golden_dir() + "/dspark-tiny/config.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->has_dspark());
  EXPECT_EQ(c->dspark_stages, 3) << "num_nextn_predict_layers says 1; the stages are mtp.0..2";
  EXPECT_EQ(c->n_mtp_layers, 0);
  EXPECT_EQ(c->dspark_block_size, 5);
  EXPECT_EQ(c->dspark_target_layer_ids, std::vector<int>({2, 3, 4}));
  EXPECT_EQ(c->compress_ratios.size(), 8u);
  // A config written back reads the same.
  auto again = parse_model_config(model_config_json(*c), "rewritten");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->dspark_stages, 3);
  EXPECT_EQ(again->dspark_noise_token_id, c->dspark_noise_token_id);
  // Broken DSpark keys name the problem.
  const nlohmann::json good = nlohmann::json::parse(model_config_json(*c));
  auto broken = [&](const char* key, nlohmann::json value) {
    nlohmann::json j = good;
    j[key] = std::move(value);
    auto r = parse_model_config(j.dump(), "broken");
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  EXPECT_NE(broken("dspark_noise_token_id", 4096).find("dspark_noise_token_id"), std::string::npos);
  EXPECT_NE(broken("dspark_target_layer_ids", {2, 9}).find("dspark_target_layer_ids"), std::string::npos);
  EXPECT_NE(broken("dspark_target_layer_ids", {3, 2}).find("dspark_target_layer_ids"), std::string::npos);
  EXPECT_NE(broken("dspark_markov_rank", 0).find("dspark_markov_rank"), std::string::npos);
  EXPECT_NE(broken("compress_ratios", {0, 0, 4, 128, 4, 0, 4, 0}).find("DSpark stage 1"), std::string::npos);
  EXPECT_NE(broken("compress_ratios", {0, 0, 4, 128, 4}).find("DSpark stages"), std::string::npos);
}

struct Case {
  const char* name;
  kernels::Numerics numerics;
  int chunk;
};

class DSparkGolden : public ::testing::TestWithParam<Case> {};

TEST_P(DSparkGolden, BothProtocolsWithinTheirBounds) {
  const Case& p = GetParam();
  const DeepseekV4& model = golden_model(p.name, p.numerics);
  for (bool end_to_end : {false, true}) {
    DSparkVerifyOptions o;
    o.golden_path = golden_dir() + "/" + p.name + "/golden.safetensors";
    o.end_to_end = end_to_end;
    o.chunk = p.chunk;
    auto report = verify_dspark(model, o);
    ASSERT_TRUE(report.ok()) << report.status().message();
    EXPECT_TRUE(report->pass()) << (end_to_end ? "end to end\n" : "isolated\n") << report->format();
    ASSERT_GE(report->tensors.size(), 17u);
    if (p.numerics == kernels::Numerics::kExact && !end_to_end)
      for (const TensorCheck& t : report->tensors) EXPECT_EQ(t.rel_l2, 0.0) << t.name << " is not bit-identical";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, DSparkGolden,
                         ::testing::Values(Case{"dspark-tiny", kernels::Numerics::kExact, 0},
                                           Case{"dspark-tiny", kernels::Numerics::kExact, 37},
                                           Case{"dspark-tiny", kernels::Numerics::kFast, 64},
                                           Case{"dspark-fp8", kernels::Numerics::kExact, 0},
                                           Case{"dspark-fp8", kernels::Numerics::kFast, 0}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string n = std::string(i.param.name) + (i.param.numerics == kernels::Numerics::kExact ? "_exact" : "_fast");
                           if (i.param.chunk) n += "_chunk" + std::to_string(i.param.chunk);
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace dsv4
