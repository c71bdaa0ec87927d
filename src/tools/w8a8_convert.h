// dsv4 convert --to w8a8: a released FP8/FP4 checkpoint rewritten as W8A8
// in the compressed-tensors layout (int-quantized: int8 weights with an f32
// scale per output channel; activations quantized per token at run time).
// Shard by shard, each output shard written through a temporary file and
// renamed, so an interrupted run resumes where it stopped and the model is
// never in memory whole.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"

namespace dsv4 {

struct ConvertReport {
  int shards_written = 0, shards_skipped = 0;  // skipped: already complete from an earlier run
  int64_t linears_converted = 0, tensors_copied = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
};

struct ConvertOptions {
  std::string input_dir, output_dir;
  std::function<void(const std::string& shard, bool skipped)> on_shard;  // progress (may be empty)
};

StatusOr<ConvertReport> convert_to_w8a8(const ConvertOptions& options);

}  // namespace dsv4
