// The embedded default model (models/default, trained by train/train.py):
// the binary carries the committed files byte for byte, it is in the
// released formats and size, and the engine's forward agrees with the
// trainer's own (tests/golden_default, the trainer's forward on the
// exported checkpoint) within the bounds of a second correct
// implementation, whole and chunked, in both numerics.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "checkpoint/model_loader.h"
#include "model/deepseek_v4.h"
#include "temp_dir.h"
#include "test_util.h"
#include "tools/embedded_model.h"
#include "tools/golden_verify.h"

namespace dsv4 {
namespace {

const std::string kModels = DSV4_MODELS_DIR;
const std::string kGolden = std::string(DSV4_DEFAULT_MODEL_GOLDEN_DIR) + "/golden.safetensors";

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(EmbeddedModel, CarriesEveryCommittedFileByteForByte) {
  std::set<std::string> embedded;
  for (const EmbeddedFile& f : embedded_files()) {
    const std::filesystem::path path = std::filesystem::path(kModels) / f.model / f.path;
    embedded.insert(path.lexically_normal().string());
    EXPECT_EQ(read_bytes(path), f.bytes) << path << " differs from the embedded copy";
  }
  int committed = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(kModels)) {
    if (!e.is_regular_file()) continue;
    ++committed;
    EXPECT_TRUE(embedded.count(e.path().lexically_normal().string())) << e.path() << " is not embedded";
  }
  EXPECT_GT(committed, 0);
  const std::vector<std::string> names = embedded_model_names();
  EXPECT_EQ(names, (std::vector<std::string>{"default", "default-dspark"}));
}

TEST(EmbeddedModel, UnknownNameIsAnErrorNamingTheEmbeddedOnes) {
  testing::TempDir dir;
  const Status st = write_embedded_model("nonesuch", dir.path());
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("nonesuch"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("default"), std::string::npos) << st.message();
}

TEST(EmbeddedModel, DefaultIsInTheReleasedFormatsAndSmall) {
  testing::TempDir dir;
  ASSERT_TRUE(write_embedded_model("default", dir.path()).ok());
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_TRUE(std::filesystem::exists(dir.file(file))) << file;
  EXPECT_LE(std::filesystem::file_size(dir.file("model.safetensors")), 32u << 20);
  auto model = load_deepseek_v4(dir.path());
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_TRUE(model_is_quantized(**model));  // FP8 attention, FP4 experts
}

struct Run {
  kernels::Numerics numerics;
  int chunk;
};

class DefaultModelGolden : public ::testing::TestWithParam<Run> {};

TEST_P(DefaultModelGolden, AgreesWithTheTrainersForward) {
  testing::TempDir dir;
  ASSERT_TRUE(write_embedded_model("default", dir.path()).ok());
  ModelOptions options;
  options.numerics = GetParam().numerics;
  auto model = load_deepseek_v4(dir.path(), options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  VerifyOptions opt;
  opt.golden_path = kGolden;
  opt.chunk = GetParam().chunk;
  auto bounds = GoldenBounds::for_run(kGolden, GetParam().numerics, /*w8a8=*/false);
  ASSERT_TRUE(bounds.ok()) << bounds.status().message();
  opt.bounds = *bounds;
  auto report = verify_golden(**model, opt);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_TRUE(report->pass()) << report->format();
  // Every output of the protocol compared; the logits of prefill, decode
  // and MTP and the first block's output under the case's bounds.
  EXPECT_GE(report->compared(), 5) << report->format();
  for (const char* name : {"layer_out.0", "prefill_logits", "decode_logits", "mtp_logits"}) {
    const TensorCheck* t = report->find(name);
    ASSERT_NE(t, nullptr) << name << "\n" << report->format();
    EXPECT_GE(t->bound, 0.0) << name << " is not bounded";
  }
}

// The same through the command a user runs: verify takes the embedded
// model by name like a directory, and an unknown name is a clear error.
TEST(EmbeddedModel, VerifyCommandTakesItByName) {
  const auto r = testing::run_dsv4("verify --model embedded:default --golden " + kGolden);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
  const auto bad = testing::run_dsv4("verify --model embedded:nonesuch --golden " + kGolden);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("no embedded model 'nonesuch'"), std::string::npos) << bad.output;
}

INSTANTIATE_TEST_SUITE_P(Runs, DefaultModelGolden,
                         ::testing::Values(Run{kernels::Numerics::kExact, 0}, Run{kernels::Numerics::kExact, 7},
                                           Run{kernels::Numerics::kFast, 0}, Run{kernels::Numerics::kFast, 7}),
                         [](const auto& info) {
                           return std::string(kernels::numerics_name(info.param.numerics)) + "_chunk" +
                                  std::to_string(info.param.chunk);
                         });

}  // namespace
}  // namespace dsv4
