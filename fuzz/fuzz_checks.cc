// What each fuzz target checks, as plain functions: the libFuzzer targets
// (fuzz_main.cc, one binary per check) and the regression test that
// replays every corpus input in each build (tests/test_fuzz_corpus.cc) call
// the same code. A check returns normally or aborts (a bug).
#include "fuzz_checks.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kv/page_layout.h"
#include "model/cache_geometry.h"
#include "checkpoint/config_json.h"
#include "model/config.h"
#include "checkpoint/safetensors.h"
#include "http/request_reader.h"
#include "server/anthropic_messages.h"
#include "server/openai_request.h"
#include "server/responses_api.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_tokenizer.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/incremental_detokenizer.h"

namespace dsv4::fuzz {

// A safetensors file (header length, JSON header, data offsets)
// from arbitrary bytes must parse or fail with a Status, never crash, and
// every tensor it accepts must lie inside the buffer.
void check_safetensors(const uint8_t* data, size_t size) {
  auto file = SafetensorsFile::from_buffer("fuzz.safetensors", data, size);
  if (!file.ok()) return;
  for (const auto& [name, t] : (*file)->tensors()) {
    if (t.data < data || t.data + t.nbytes > data + size) std::abort();  // a tensor outside the file
    if (t.numel() < 0) std::abort();
  }
}

// Config.json text must load into a ModelConfig or fail with a
// Status naming the problem; an accepted config must describe a model the
// cache geometry and page layout can be built for.
void check_config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = parse_model_config(text, "fuzz");
  if (!config.ok()) return;
  if (config->summary().empty()) std::abort();
  (void)PageLayout::of(CacheGeometry::of(*config), 32);
}

// The DeepSeek tokenizer (its tokenizer.json from the npm peer)
// encodes any byte string, and decoding the ids gives the text back
// (byte-level BPE loses nothing), with invalid UTF-8 as U+FFFD (as the
// reference tokenizer, which only ever sees Python strings, has it).
namespace {
const BpeTokenizer& tokenizer() {
  static std::unique_ptr<BpeTokenizer> t = [] {
    auto loaded = BpeTokenizer::load(DSV4_TOKENIZER_DIR);
    if (!loaded.ok()) std::abort();
    return std::move(*loaded);
  }();
  return *t;
}
}  // namespace

void check_tokenizer(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tokenizer().encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= tokenizer().vocab_size()) std::abort();
  std::string rest, expected = utf8_complete_prefix(text, &rest);
  if (!rest.empty()) expected += "\xEF\xBF\xBD";
  if (tokenizer().decode(ids) != expected) std::abort();
}

// Parsing a model's completion text (reasoning, content, DSML
// tool calls) in each chat mode either succeeds or fails with a Status.
void check_chat_parse(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (ChatMode mode : {ChatMode::kChat, ChatMode::kThinking}) {
    auto parsed = parse_completion(text, mode);
    (void)parsed;
  }
}

// An HTTP request body for /v1/completions and
// /v1/chat/completions either becomes a generation plan whose every prompt
// fits the model, or a 4xx error naming the problem; never a crash.
void check_request(const uint8_t* data, size_t size) {
  static const ByteTokenizer tokenizer(512);
  ServedModel model;
  model.name = "dsv4-default";
  model.tokenizer = &tokenizer;
  model.max_model_len = 4096;
  model.vocab_size = 512;
  const std::string body(reinterpret_cast<const char*>(data), size);
  ApiError error;
  auto json = parse_body(body, &error);
  if (!json) {
    if (error.status < 400 || error.status >= 500) std::abort();
    return;
  }
  // The Responses API: its input items, tools and options become a chat
  // plan (previous_response_id against an empty store: a 404).
  static const ResponseStore store(4);
  const ResponsePlanOrError r = plan_response(*json, model, store);
  if (!r.plan && (r.error.status < 400 || r.error.status >= 500)) std::abort();
  if (r.plan)
    for (int32_t id : r.plan->generation.prompts.at(0))
      if (id < 0 || id >= model.vocab_size) std::abort();
  // The three request formats (completions, chat, Anthropic messages).
  for (int format = 0; format < 3; ++format) {
    const PlanOrError p = format == 0 ? plan_completion(*json, model)
                          : format == 1 ? plan_chat(*json, model)
                                        : plan_messages(*json, model);
    if (!p.plan) {
      if (p.error.status < 400 || p.error.status >= 500) std::abort();
      continue;
    }
    for (const auto& prompt : p.plan->prompts)
      for (int32_t id : prompt)
        if (id < 0 || id >= model.vocab_size) std::abort();
  }
}

// The bytes of a connection, cut into pieces where the input's first bytes
// say: the reader gives the same requests however they are cut, never more
// bytes than came, and once it refuses it refuses for good, with a status
// it means (400, 413, 431, 505).
void check_http(const uint8_t* data, size_t size) {
  if (size < 2) return;
  RequestLimits limits;
  limits.max_head_bytes = 2048;
  limits.max_body_bytes = 4096;
  const size_t step = 1 + data[0] % 64;
  const std::string wire(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto run = [&](size_t piece, std::vector<HttpRequest>* got, int* error) {
    RequestReader reader(limits);
    for (size_t at = 0; at < wire.size() && *error == 0; at += piece) {
      reader.append(std::string_view(wire).substr(at, piece));
      for (;;) {
        HttpRequest q;
        const auto r = reader.parse(&q);
        if (r == RequestReader::Result::kNeedMore) break;
        if (r == RequestReader::Result::kError) {
          *error = reader.error_status();
          HttpRequest again;
          if (reader.parse(&again) != RequestReader::Result::kError) std::abort();
          break;
        }
        if (q.method.empty() || q.body.size() > limits.max_body_bytes) std::abort();
        if (!(q.path.rfind('/', 0) == 0 || (q.path == "*" && q.method == "OPTIONS"))) std::abort();
        if (q.version != 10 && q.version != 11) std::abort();
        got->push_back(std::move(q));
      }
    }
    if (*error != 0 && *error != 400 && *error != 413 && *error != 431 && *error != 505) std::abort();
  };
  std::vector<HttpRequest> whole, pieces;
  int whole_error = 0, pieces_error = 0;
  run(wire.size(), &whole, &whole_error);
  run(step, &pieces, &pieces_error);
  size_t bytes = 0;
  for (const HttpRequest& q : whole) bytes += q.method.size() + q.target.size() + q.body.size();
  if (bytes > wire.size()) std::abort();
  // However the bytes are cut, the requests before an error are the same.
  const size_t common = std::min(whole.size(), pieces.size());
  for (size_t i = 0; i < common; ++i)
    if (whole[i].target != pieces[i].target || whole[i].body != pieces[i].body || whole[i].method != pieces[i].method)
      std::abort();
  if (whole_error == 0 && pieces_error == 0 && whole.size() != pieces.size()) std::abort();
}

}  // namespace dsv4::fuzz
