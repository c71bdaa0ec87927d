// The DeepSeek-V4.1 golden protocol (tests/golden_v41/README.md): each
// prompt prefilled alone (in chunks, or the prompts packed into the same
// forwards), then the sequences decoded together on the reference's tokens,
// a DSpark draft after every step from its greedy token; every tensor
// compared with the reference's (layer_out.N, main_hidden, prefill_logits,
// decode_logits, dspark_logits, dspark_confidence) and every drafted token.
#pragma once

#include <string>

#include "base/status.h"
#include "tools/golden_verify.h"

namespace dsv4 {

class DeepseekV41;

struct V41VerifyOptions {
  std::string golden_path;
  int64_t chunk = 0;    // prefill chunk size; 0 = whole prompt
  bool packed = false;  // the prompts' chunks share forwards
  // Exact numerics: every tensor bit-identical, every token the
  // reference's. Fast: the case's bounds for other correct implementations
  // (GoldenBounds::for_run), the drafted tokens' share included.
  GoldenBounds bounds = GoldenBounds::exact();
};

StatusOr<VerifyReport> verify_v41_golden(const DeepseekV41& model, const V41VerifyOptions& options);

}  // namespace dsv4
