// A linear as the released checkpoints store it: FP8 e4m3 codes with
// 128x128 block scales, or FP4 e2m1 pairs (I8/U8 bytes, low nibble first)
// with a scale per 32 inputs. Read by the converters, which rewrite it in
// another format row by row.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "checkpoint/checkpoint.h"

namespace dsv4 {

struct ReleasedLinear {
  const TensorInfo* weight;
  const TensorInfo* scale;  // F8_E8M0, F32 or BF16
  bool fp4;
  int64_t out, in;
};

// Empty when `name` is not the weight of an FP8/FP4 linear; an error naming
// the tensor when its scale does not fit it.
StatusOr<std::optional<ReleasedLinear>> released_linear(const Checkpoint& ckpt, const std::string& name);

// Row r of the linear, dequantized to `row` (q.in values).
void dequantize_row(const ReleasedLinear& q, int64_t r, float* row);

}  // namespace dsv4
