// dsv4 run end to end through the binary: text and a summary from the
// embedded default model (prompts as chat turns, or raw) and a golden
// checkpoint; clear errors for bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "temp_dir.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_encoding.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using testing::run_dsv4;

// The prompts' token count as the chat API renders them: a user's turn in
// the model's chat encoding, tokenized by its own tokenizer.
int64_t chat_prompt_tokens(const std::vector<std::string>& prompts) {
  auto tokenizer = BpeTokenizer::load(std::string(DSV4_MODELS_DIR) + "/default");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  if (!tokenizer.ok()) return -1;
  int64_t n = 0;
  for (const std::string& prompt : prompts) {
    auto text = encode_chat(nlohmann::ordered_json::array({{{"role", "user"}, {"content", prompt}}}), ChatOptions{});
    EXPECT_TRUE(text.ok());
    n += static_cast<int64_t>((*tokenizer)->encode(*text).size());
  }
  return n;
}

TEST(RunCommand, EmbeddedModelGeneratesForSeveralPrompts) {
  const auto r = run_dsv4(
      "run --prompt 'Hello there' --prompt 'The quick brown fox' --max-tokens 8 --seed 3 --ignore-eos "
      "--kv-cache-memory 128M");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[0] "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[1] "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model: embedded model 'default'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bytes/token at 4K context"), std::string::npos) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"((\d+) requests: (\d+) prompt \+ (\d+) generated tokens in ([0-9.]+)s, ([0-9.]+) generated tok/s)")))
      << r.output;
  EXPECT_EQ(m[1], "2");
  EXPECT_EQ(std::stoll(m[2]), chat_prompt_tokens({"Hello there", "The quick brown fox"}));
  EXPECT_EQ(m[3], "16");
  EXPECT_GT(std::stod(m[5]), 0.0);
}

// --raw sends the text itself: fewer tokens than the rendered chat turn.
TEST(RunCommand, RawPromptIsTheTextAsWritten) {
  const auto r = run_dsv4("run --raw --prompt 'Hello there' --max-tokens 2 --ignore-eos --kv-cache-memory 128M");
  ASSERT_EQ(r.code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(1 requests: (\d+) prompt)"))) << r.output;
  EXPECT_LT(std::stoll(m[1]), chat_prompt_tokens({"Hello there"}));
  EXPECT_GT(std::stoll(m[1]), 0);
}

TEST(RunCommand, GoldenCheckpointAndPromptFile) {
  const testing::TempDir tmp;
  const std::string file = tmp.file("prompts.txt");
  std::ofstream(file) << "first prompt\n\nsecond prompt\nthird\n";
  const auto r = run_dsv4("run --model " + testing::golden_dir() + "/small-real --prompt-file " + file +
                          " --max-tokens 4 --temperature 0 --ignore-eos --kv-cache-memory 512M --max-num-seqs 8");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[2] "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3 requests: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" 12 generated tokens"), std::string::npos) << r.output;
}

TEST(RunCommand, BadParametersAreClearErrors) {
  const std::string base = "run --kv-cache-memory 64M --max-num-seqs 4 ";
  for (const auto& [args, words] : std::vector<std::pair<std::string, std::string>>{
           {"--prompt hi --max-tokens -1", "max_tokens must be at least 1"},
           {"--prompt hi --top-p 0", "top_p must be in (0, 1]"},
           {"--prompt hi --top-p 1.5", "top_p must be in (0, 1]"},
           {"--prompt hi --temperature warm", "needs a number"},
           {"--prompt 'this prompt is far too long' --max-model-len 8", "max-model-len is 8"},
           {"--prompt hi --max-tokens 5000", "maximum context length"},
           {"--max-tokens 3", "at least one --prompt"},
           {"--prompt hi --kv-cache-memory lots", "--kv-cache-memory needs a size"},
           {"--prompt hi --frobnicate 1", "unknown option --frobnicate"},
       }) {
    const auto r = run_dsv4(base + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(words), std::string::npos) << args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace dsv4
