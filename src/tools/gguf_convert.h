// dsv4 convert --to gguf: a released DeepSeek-V4 checkpoint (FP8 linears,
// FP4 routed experts) rewritten as a GGUF file for llama.cpp's `deepseek4`
// architecture, the way llama.cpp's own converter does it: FP8 blocks
// dequantized and requantized to Q8_0, FP4 experts repacked to MXFP4 with no
// rounding (same e2m1 codes, same e8m0 scales, llama.cpp's nibble order),
// BF16 matrices kept, norms and 1-D tensors as F32, hash tables as I32. The
// MTP block is left out (llama.cpp loads it from a separate file). No
// tokenizer is written (tokenizer.ggml.model "none"): the file is for feeding
// token ids, as the peer benchmark does.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace dsv4 {

struct GgufConvertOptions {
  std::string input_dir, output_path;
};

struct GgufConvertReport {
  int64_t tensors = 0, q8_0 = 0, mxfp4 = 0, copied = 0;
  int64_t mtp_tensors_left_out = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
};

StatusOr<GgufConvertReport> convert_to_gguf(const GgufConvertOptions& options);

}  // namespace dsv4
