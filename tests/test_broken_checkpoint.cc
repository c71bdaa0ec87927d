// Broken checkpoints fail with a clear message naming the problem and exit
// code 2, through the real binary.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/model_loader.h"
#include "checkpoint/checkpoint.h"
#include "model/deepseek_v4.h"
#include "checkpoint/safetensors_writer.h"
#include "tools/synthetic.h"
#include "temp_dir.h"
#include "test_util.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

struct RunResult {
  int code;
  std::string output;
};

RunResult run(const std::string& args) {
  std::string cmd = std::string(DSV4_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

class BrokenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.file("model");
    auto cfg = synthetic_config("default", R"({"num_hidden_layers": 2, "compress_ratios": [0, 4, 0]})");
    ASSERT_TRUE(cfg.ok()) << cfg.status().message();
    SyntheticOptions opt;
    opt.shards = 1;
    ASSERT_TRUE(write_synthetic_checkpoint(*cfg, opt, dir_).ok());
    golden_ = dir_ + "/none.safetensors";
  }

  // Rewrites model.safetensors through `edit`, which may drop or change tensors.
  template <class Edit>
  void rewrite(Edit edit) {
    testing::rewrite_safetensors(dir_ + "/model.safetensors", edit);
  }

  testing::TempDir tmp_{"dsv4_broken"};
  std::string dir_, golden_;
};

TEST_F(BrokenCheckpoint, TruncatedFile) {
  fs::resize_file(dir_ + "/model.safetensors", fs::file_size(dir_ + "/model.safetensors") / 2);
  RunResult r = run("verify --model " + dir_ + " --golden " + golden_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("truncated"), std::string::npos) << r.output;
}

TEST_F(BrokenCheckpoint, MissingTensor) {
  rewrite([](const std::string& name, DType*, std::vector<int64_t>*, std::vector<uint8_t>*) {
    return name != "layers.1.attn.indexer.weights_proj.weight";
  });
  RunResult r = run("verify --model " + dir_ + " --golden " + golden_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("'layers.1.attn.indexer.weights_proj.weight' is missing"), std::string::npos) << r.output;
}

TEST_F(BrokenCheckpoint, WrongDtype) {
  rewrite([](const std::string& name, DType* dtype, std::vector<int64_t>*, std::vector<uint8_t>* bytes) {
    if (name == "layers.0.attn.attn_sink") *dtype = DType::kI32;  // same size as F32
    return true;
  });
  RunResult r = run("verify --model " + dir_ + " --golden " + golden_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("'layers.0.attn.attn_sink'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("dtype I32"), std::string::npos) << r.output;
}

TEST_F(BrokenCheckpoint, WrongShape) {
  rewrite([](const std::string& name, DType*, std::vector<int64_t>* shape, std::vector<uint8_t>* bytes) {
    if (name == "norm.weight") {
      (*shape)[0] /= 2;
      bytes->resize(bytes->size() / 2);
    }
    return true;
  });
  RunResult r = run("verify --model " + dir_ + " --golden " + golden_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("'norm.weight'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("expected [128]"), std::string::npos) << r.output;
}

TEST_F(BrokenCheckpoint, BadConfig) {
  std::ofstream(dir_ + "/config.json") << R"({"hidden_size": 128})";
  RunResult r = run("verify --model " + dir_ + " --golden " + golden_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("missing required field"), std::string::npos) << r.output;
}

TEST_F(BrokenCheckpoint, MissingDirectoryAndBadArguments) {
  EXPECT_EQ(run("verify --model /nonexistent/model").code, 2);
  RunResult r = run("verify --model " + dir_ + " --chunk abc");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--chunk"), std::string::npos) << r.output;
  EXPECT_EQ(run("nosuchcommand").code, 2);
}

TEST_F(BrokenCheckpoint, IntactCheckpointLoadsButMissingGoldenIsAnError) {
  RunResult r = run("verify --model " + dir_ + " --golden " + golden_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("none.safetensors"), std::string::npos) << r.output;
}

TEST(Mkmodel, Fp8CheckpointRoundTripsThroughTheLoader) {
  const testing::TempDir tmp("dsv4_fp8");
  const std::string dir = tmp.file("model");
  RunResult r = run("mkmodel --out " + dir + " --weights fp8 --seed 5 --shards 3");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
  auto ckpt = Checkpoint::open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  const TensorInfo* w = ckpt->get()->find("layers.0.ffn.experts.0.w1.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kI8);
  const TensorInfo* q = ckpt->get()->find("layers.0.attn.wq_a.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::kF8E4M3);
  // The FP8/FP4 model loads and runs, and prefill in chunks gives the same logits.
  auto model = load_deepseek_v4(dir);
  ASSERT_TRUE(model.ok()) << model.status().message();
  std::vector<int32_t> prompt(40);
  for (int i = 0; i < 40; ++i) prompt[i] = (i * 13 + 7) % (*model)->config().vocab_size;
  ContiguousCache whole = (*model)->new_sequence(), pieces = (*model)->new_sequence();
  ForwardBatch a;
  a.add(&whole, prompt.data(), 40, 40);
  ForwardOutput out_whole, out_piece;
  ASSERT_TRUE((*model)->forward(a, &out_whole).ok());
  for (int s = 0; s < 40; s += 9) {
    ForwardBatch b;
    b.add(&pieces, prompt.data() + s, std::min(9, 40 - s), 40);
    ASSERT_TRUE((*model)->forward(b, &out_piece).ok());
  }
  EXPECT_EQ(out_whole.logits, out_piece.logits);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dsv4
