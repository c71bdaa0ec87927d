// dsv4 bench --serving (bench_serving.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/deepseek_v4.h"

namespace dsv4::app {

// What the speculative runs decode: chat turns the model answers (rendered
// by its chat encoding, each decoded to its end), or none for a model
// without a chat tokenizer (one random prompt, decoded for --gen tokens).
struct ServingPrompts {
  std::vector<std::vector<int32_t>> prompts;
  bool chat = false;
  std::string what;  // for the report: "8 held-out chat prompts"
};

// Speculative decoding at each K against plain decoding, and time to first
// token cold and after a prefix-cache hit at ctx.
int bench_serving(const DeepseekV4& m, const std::string& name, const ServingPrompts& chat_prompts, int64_t ctx,
                  int64_t gen, const std::vector<int64_t>& ks, const std::string& csv);

}  // namespace dsv4::app
