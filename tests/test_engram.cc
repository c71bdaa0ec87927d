// DeepSeek-V4.1 Engram's row ids: the released hash constants, the token
// map folded from a tokenizer, and every row of the goldens' prompts as the
// official reference computed them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "checkpoint/config_json.h"
#include "checkpoint/released_configs.h"
#include "checkpoint/safetensors.h"
#include "golden_v41_case.h"
#include "model/engram_hash.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/engram_token_map.h"

namespace dsv4 {
namespace {

std::vector<int64_t> read_i64(const SafetensorsFile& f, const std::string& name, std::vector<int64_t>* shape) {
  const TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  *shape = t->shape;
  std::vector<int64_t> v(t->numel());
  EXPECT_TRUE(f.read(*t, 0, v.size() * 8, v.data()).ok());
  return v;
}

TEST(Engram, NumpyBoundedIntegersAsDefaultRngDrawsThem) {
  // The release's multipliers (engram_compressed_vocab_size 99092): the
  // same numbers published GGUF conversions carry.
  auto c = parse_v41_model_config(released_config_json("v41-flash"), "v41-flash");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const EngramHashLayout l = engram_hash_layout(c->engram, c->engram.compressed_vocab_size, 2);
  EXPECT_EQ(l.multipliers[0], (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
  EXPECT_EQ(l.multipliers[1], (std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
  // Layer 1 takes the first 24 primes above 16,000,000, layer 14 the next
  // 24, and each table is exactly their sum.
  ASSERT_EQ(l.columns(), 24);
  EXPECT_EQ(l.primes[0].front(), 16000057);
  EXPECT_EQ(l.primes[0].back(), 16000463);
  EXPECT_EQ(l.primes[1].front(), 16000477);
  EXPECT_EQ(l.primes[1].back(), 16000889);
  EXPECT_EQ(l.offsets[0][23], 368005705);
  EXPECT_EQ(l.offsets[1][23], 368015793);
  for (int k = 0; k < 2; ++k)
    EXPECT_EQ(l.offsets[k].back() + l.primes[k].back(), c->engram.num_embeddings[k]) << k;
}

TEST(Engram, TokenMapFoldsCaseAccentsWidthAndSpace) {
  EXPECT_EQ(engram_fold(" The"), "the");
  EXPECT_EQ(engram_fold("THE"), "the");
  EXPECT_EQ(engram_fold("caf\xC3\xA9"), "cafe");                   // café
  EXPECT_EQ(engram_fold("\xEF\xBC\xB4\xEF\xBC\xA8\xEF\xBC\xA5"), "the");  // full-width ＴＨＥ
  EXPECT_EQ(engram_fold("\xEF\xAC\x81le"), "file");                // the ligature ﬁ
  EXPECT_EQ(engram_fold(" "), " ");                                 // one space survives
  EXPECT_EQ(engram_fold("  "), " ");
  EXPECT_EQ(engram_fold("\n\n"), " ");
  EXPECT_EQ(engram_fold("\t x \r\n"), "x");
}

TEST(Engram, RowsOfTheGoldenPromptsAreTheReferences) {
  for (const std::string name : {"v41-tiny", "v41-fp8"}) {
    SCOPED_TRACE(name);
    auto config = parse_v41_model_config(read_text_file(golden_v41_dir(name) + "/config.json"), name);
    ASSERT_TRUE(config.ok()) << config.status().message();
    auto tokenizer = BpeTokenizer::load(golden_v41_dir(name));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
    auto map = engram_token_map(**tokenizer, config->engram.compressed_vocab_size);
    ASSERT_TRUE(map.ok()) << map.status().message();
    const EngramConfig& e = config->engram;
    const EngramHashLayout layout = engram_hash_layout(e, map->size, map->compressed[e.pad_id]);
    // The tables are sized by the layout's primes.
    for (size_t k = 0; k < e.layer_ids.size(); ++k)
      EXPECT_EQ(layout.offsets[k].back() + layout.primes[k].back(), e.num_embeddings[k]);

    auto golden = SafetensorsFile::open(golden_v41_dir(name) + "/golden.safetensors");
    ASSERT_TRUE(golden.ok()) << golden.status().message();
    std::vector<int64_t> ids_shape, rows_shape;
    const std::vector<int64_t> ids = read_i64(**golden, "prompt_ids", &ids_shape);
    const std::vector<int64_t> want = read_i64(**golden, "engram_hashes", &rows_shape);
    ASSERT_EQ(rows_shape, (std::vector<int64_t>{ids_shape[0], ids_shape[1], 2, layout.columns()}));
    const int64_t b = ids_shape[0], s = ids_shape[1], per = 2 * layout.columns();
    int64_t mismatches = 0;
    for (int64_t r = 0; r < b; ++r) {
      std::vector<int64_t> history(s);
      for (int64_t p = 0; p < s; ++p) history[p] = map->compressed[ids[r * s + p]];
      std::vector<int64_t> got(per);
      for (int64_t p = 0; p < s; ++p) {
        engram_rows(layout, history.data(), p, got.data());
        for (int64_t k = 0; k < per; ++k) mismatches += got[k] != want[(r * s + p) * per + k];
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(Engram, ATokenizerThatFoldsDifferentlyIsRefused) {
  auto tokenizer = BpeTokenizer::load(golden_v41_dir("v41-tiny"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  auto map = engram_token_map(**tokenizer, 99092);
  ASSERT_FALSE(map.ok());
  EXPECT_NE(map.status().message().find("419 compressed ids"), std::string::npos) << map.status().message();
}

}  // namespace
}  // namespace dsv4
