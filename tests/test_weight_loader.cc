// The streaming loader on checkpoints laid out as the released ones are:
// tensors past 4 GiB into a shard, a tensor of more than 2^31 elements,
// shards found through model.safetensors.index.json.
#include <fcntl.h>
#include <sys/stat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/dtype.h"
#include "base/weight_buffer.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/config_json.h"
#include "checkpoint/model_loader.h"
#include "checkpoint/safetensors.h"
#include "temp_dir.h"
#include "test_util.h"
#include "tools/capacity_plan.h"
#include "runtime/local_executor.h"
#include "tools/synthetic.h"

namespace dsv4 {
namespace {

// Rewrites the one-shard checkpoint in `from` into `to` with an unused U8
// tensor of `pad` bytes first, so every real tensor starts past `pad`; the
// pad is a hole in a sparse file (nothing is written there).
void write_padded_shard(const std::string& from, const std::string& to, uint64_t pad) {
  auto src = SafetensorsFile::open(from + "/model.safetensors");
  ASSERT_TRUE(src.ok()) << src.status().message();
  nlohmann::json header;
  header["padding.unused"] = {{"dtype", "U8"}, {"shape", {pad}}, {"data_offsets", {0, pad}}};
  uint64_t at = pad;
  for (const auto& [name, t] : (*src)->tensors()) {
    header[name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + t.nbytes}}};
    at += t.nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t len = text.size(), data_start = 8 + len;
  const int fd = ::open((to + "/model.safetensors").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  uint8_t len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(len >> (8 * i));
  ASSERT_EQ(pwrite(fd, len_bytes, 8, 0), 8);
  ASSERT_EQ(pwrite(fd, text.data(), len, 8), static_cast<ssize_t>(len));
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(data_start + at)), 0);
  at = pad;
  for (const auto& [name, t] : (*src)->tensors()) {
    ASSERT_EQ(pwrite(fd, t.data, t.nbytes, static_cast<off_t>(data_start + at)), static_cast<ssize_t>(t.nbytes));
    at += t.nbytes;
  }
  ::close(fd);
  std::ifstream in(from + "/config.json");
  std::ofstream(to + "/config.json") << in.rdbuf();
}

// Last-position logits of one prompt.
std::vector<float> logits_of(const DeepseekV4& model) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 37 + 5) % model.config().vocab_size);
  ContiguousCache cache = model.new_sequence();
  ForwardBatch batch;
  batch.add(&cache, prompt.data(), static_cast<int64_t>(prompt.size()), static_cast<int64_t>(prompt.size()));
  ForwardOutput out;
  const Status st = model.forward(batch, &out);
  EXPECT_TRUE(st.ok()) << st.message();
  return out.logits;
}

TEST(WeightLoader, TensorsPastFourGibInAShardLoadAsTheSameModel) {
  const testing::TempDir tmp;
  const std::string plain = tmp.file("plain"), padded = tmp.file("padded");
  auto config = synthetic_config("default");
  ASSERT_TRUE(config.ok());
  SyntheticOptions opt;
  opt.weights = SyntheticWeights::kFp8;
  opt.shards = 1;
  ASSERT_TRUE(write_synthetic_checkpoint(*config, opt, plain).ok());
  ASSERT_EQ(::mkdir(padded.c_str(), 0755), 0);
  const uint64_t pad = (uint64_t{9} << 29) + 4096;  // 4.5 GiB and a page: past 2^32 and 2^31 elements
  write_padded_shard(plain, padded, pad);

  auto ckpt = Checkpoint::open(padded);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  const TensorInfo* big = (*ckpt)->find("padding.unused");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->numel(), static_cast<int64_t>(pad));
  EXPECT_GT((*ckpt)->find("embed.weight")->offset, uint64_t{1} << 32);

  auto a = load_deepseek_v4(plain), b = load_deepseek_v4(padded);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ((*a)->weights().resident_bytes(), (*b)->weights().resident_bytes());
  const auto la = logits_of(**a), lb = logits_of(**b);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), 4 * la.size()), 0);
}

// The planner on a BF16 checkpoint (mkmodel's default) against the loaded
// engine, one rank and two.
TEST(WeightLoader, PlannerAgreesWithTheEngineOnABf16Checkpoint) {
  const testing::TempDir tmp;
  const std::string dir = tmp.file("m");
  auto config = synthetic_config("small");
  ASSERT_TRUE(config.ok());
  ASSERT_TRUE(write_synthetic_checkpoint(*config, SyntheticOptions{}, dir).ok());
  for (int tp : {1, 2}) {
    ParallelOptions parallel;
    parallel.topology = {tp, 1, 0};
    KvCacheOptions cache;
    cache.memory_bytes = int64_t{256} << 20;
    cache.max_num_seqs = 8;
    auto engine = LocalExecutor::create(dir, ModelOptions{}, parallel, cache);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    PlanOptions o;
    o.topology = parallel.topology;
    o.weights = PlanWeights::kBf16;
    o.cache = cache;
    o.kv_cache_bytes = cache.memory_bytes;
    auto plan = plan_capacity(*config, o);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    const int64_t engine_bytes = (*engine)->model(0).weights().resident_bytes();
    EXPECT_NEAR(plan->rank_weight_bytes, engine_bytes, 0.01 * engine_bytes) << "tp " << tp;
    EXPECT_NEAR(plan->tokens_per_group, (*engine)->cache(0)->token_capacity(), 0.01 * plan->tokens_per_group);
  }
}

TEST(WeightLoader, ByteSizesParseAsMemoryOrBandwidth) {
  EXPECT_EQ(*parse_byte_size("512G"), int64_t{512} << 30);
  EXPECT_EQ(*parse_byte_size("384GiB"), int64_t{384} << 30);
  EXPECT_EQ(*parse_byte_size("400G", /*decimal=*/true), int64_t{400} * 1000 * 1000 * 1000);
  EXPECT_EQ(*parse_byte_size("1.5T"), static_cast<int64_t>(1.5 * 1099511627776.0));
  EXPECT_EQ(*parse_byte_size("123"), 123);
  EXPECT_FALSE(parse_byte_size("12X").ok());
  EXPECT_FALSE(parse_byte_size("lots").ok());
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// dsv4 plan on the released configs: Flash fits a 384 GiB machine on the
// canonical layout; Pro's FP4 experts alone outgrow 768 GiB (exit 1).
TEST(PlanCli, ReleasedConfigsOnBigMachines) {
  auto flash = testing::run_dsv4("plan --config flash --memory 384G --tp 4 --dp 4 --ep 16 --max-model-len 65536 "
                                 "--bandwidth 400G");
  EXPECT_EQ(flash.code, 0) << flash.output;
  EXPECT_NE(flash.output.find("16 ranks: TP4 x DP4, EP16"), std::string::npos) << flash.output;
  EXPECT_NE(flash.output.find("requests of 65536 tokens at once"), std::string::npos) << flash.output;
  EXPECT_NE(flash.output.find("tok/s per sequence at 400 GB/s"), std::string::npos) << flash.output;
  auto pro = testing::run_dsv4("plan --config pro --memory 768G");
  EXPECT_EQ(pro.code, 1) << pro.output;
  EXPECT_NE(pro.output.find("DOES NOT FIT"), std::string::npos) << pro.output;
  auto bad = testing::run_dsv4("plan --config flash --memory lots");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--memory"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

int64_t mapping_count() {
  std::ifstream maps("/proc/self/maps");
  int64_t n = 0;
  for (std::string line; std::getline(maps, line);) ++n;
  return n;
}

// Whether any mapping of this process holds address p.
bool mapped(uintptr_t p) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &begin, &end) == 2 && begin <= p && p < end) return true;
  }
  return false;
}

// Weight buffers share large mappings: the released Pro's 70K expert
// matrices as one mapping each would pass the kernel's limit of 65530.
TEST(WeightBuffers, HundredsOfMatricesTakeAFewMappingsAndGiveThemBack) {
  const int64_t before = mapping_count();
  std::vector<uintptr_t> addresses;
  {
    std::vector<WeightBuffer<uint8_t>> matrices(600);
    for (auto& m : matrices) m.resize(size_t{4} << 20);  // 2.4 GiB of address space, barely touched
    for (size_t i = 0; i < matrices.size(); i += 97) matrices[i][i] = 1;
    EXPECT_LT(mapping_count() - before, 40);
    for (const auto& m : matrices) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data()) % 64, 0u);
      addresses.push_back(reinterpret_cast<uintptr_t>(m.data()));
    }
  }
  for (uintptr_t a : addresses) EXPECT_FALSE(mapped(a)) << "a region still mapped after its matrices went";
}

}  // namespace
}  // namespace dsv4
