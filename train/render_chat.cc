// The trainer's view of the chat format: each stdin line a JSON object
// {"messages": [...], "thinking": bool, "add_generation_prompt": bool},
// each stdout line {"text": "..."} as encode_chat renders it (or {"error":
// "..."}), so the training data is the text dsv4 serve renders. Given a
// directory holding a tokenizer.json, also "ids": the text as the engine
// tokenizes it.
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_encoding.h"

int main(int argc, char** argv) {
  std::unique_ptr<dsv4::BpeTokenizer> tokenizer;
  if (argc > 1) {
    auto loaded = dsv4::BpeTokenizer::load(argv[1]);
    if (!loaded.ok()) {
      std::cerr << loaded.status().message() << "\n";
      return 2;
    }
    tokenizer = std::move(*loaded);
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    nlohmann::ordered_json out;
    try {
      const auto in = nlohmann::ordered_json::parse(line);
      dsv4::ChatOptions options;
      options.mode = in.value("thinking", false) ? dsv4::ChatMode::kThinking : dsv4::ChatMode::kChat;
      options.add_generation_prompt = in.value("add_generation_prompt", true);
      auto text = dsv4::encode_chat(in.at("messages"), options);
      if (!text.ok()) {
        out["error"] = text.status().message();
      } else {
        out["text"] = *text;
        if (tokenizer) out["ids"] = tokenizer->encode(*text);
      }
    } catch (const std::exception& e) {
      out["error"] = e.what();
    }
    std::cout << out.dump() << "\n";
  }
  return 0;
}
