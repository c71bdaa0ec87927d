// Every input in fuzz/corpus (the fuzzers' seeds, and each input a fuzzer
// once broke a check with, kept as a regression case) through the same
// checks the fuzz targets run, in every build.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "fuzz_checks.h"

namespace dsv4 {
namespace {

void replay(const std::string& name, void (*check)(const uint8_t*, size_t)) {
  const std::filesystem::path dir = std::filesystem::path(DSV4_FUZZ_CORPUS_DIR) / name;
  int inputs = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(f.path(), std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(f.path().string());
    check(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());  // aborts on a broken property
    ++inputs;
  }
  EXPECT_GT(inputs, 0) << "no corpus in " << dir;
}

TEST(FuzzCorpus, SafetensorsHeaders) { replay("safetensors", fuzz::check_safetensors); }
TEST(FuzzCorpus, ConfigJson) { replay("config", fuzz::check_config); }
TEST(FuzzCorpus, TokenizerRoundTrip) { replay("tokenizer", fuzz::check_tokenizer); }
TEST(FuzzCorpus, ChatCompletionParsing) { replay("chat_parse", fuzz::check_chat_parse); }
TEST(FuzzCorpus, RequestBodies) { replay("request", fuzz::check_request); }
TEST(FuzzCorpus, HttpRequestBytes) { replay("http", fuzz::check_http); }

}  // namespace
}  // namespace dsv4
