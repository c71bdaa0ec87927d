// mkmodel writes each shard after the first as soon as a later shard's
// block begins (so it holds about a shard, not a real-shape model's tens of
// GB): the shards and the index hold exactly what one file holds.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "tools/synthetic.h"
#include "temp_dir.h"

namespace dsv4 {
namespace {

TEST(SyntheticShards, ShardsWrittenAsTheyFillHoldWhatOneFileHolds) {
  testing::TempDir tmp{"dsv4_shards"};
  auto cfg = synthetic_config("default", R"({"num_hidden_layers": 3, "compress_ratios": [0, 4, 128, 0]})");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  const std::string one = tmp.file("one"), four = tmp.file("four");
  SyntheticOptions opt;
  opt.shards = 1;
  ASSERT_TRUE(write_synthetic_checkpoint(*cfg, opt, one).ok());
  opt.shards = 4;
  ASSERT_TRUE(write_synthetic_checkpoint(*cfg, opt, four).ok());

  auto whole = Checkpoint::open(one);
  auto sharded = Checkpoint::open(four);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  ASSERT_TRUE(sharded.ok()) << sharded.status().message();
  ASSERT_EQ((*sharded)->shards().size(), 4u);
  EXPECT_EQ((*sharded)->num_tensors(), (*whole)->num_tensors());
  EXPECT_EQ((*sharded)->total_bytes(), (*whole)->total_bytes());
  size_t compared = 0;
  for (const SafetensorsFile* file : (*whole)->shards())
    for (const auto& [name, t] : file->tensors()) {
      const TensorInfo* s = (*sharded)->find(t.name);
      ASSERT_NE(s, nullptr) << t.name;
      EXPECT_EQ(s->dtype, t.dtype) << t.name;
      EXPECT_EQ(s->shape, t.shape) << t.name;
      ASSERT_EQ(s->nbytes, t.nbytes) << t.name;
      std::vector<uint8_t> a(t.nbytes), b(t.nbytes);
      ASSERT_TRUE(file->read(t, 0, t.nbytes, a.data()).ok());
      ASSERT_TRUE(s->source->read(*s, 0, s->nbytes, b.data()).ok());
      EXPECT_EQ(a, b) << t.name;
      // A block's tensors in its own shard: layer i of 3 (and the MTP
      // block as a fourth) in shard i; the rest in the first.
      int expect = 0;
      if (t.name.rfind("layers.", 0) == 0) expect = std::stoi(t.name.substr(7));
      if (t.name.rfind("mtp.", 0) == 0) expect = 3;
      EXPECT_EQ(std::filesystem::path(*s->file).filename().string(),
                "model-0000" + std::to_string(expect + 1) + "-of-00004.safetensors")
          << t.name;
      ++compared;
    }
  EXPECT_EQ(compared, (*whole)->num_tensors());
}

}  // namespace
}  // namespace dsv4
