#include "checkpoint/released_linear.h"

#include <cmath>
#include <cstring>

#include "base/dtype.h"

namespace dsv4 {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

float scale_at(const TensorInfo* s, int64_t i) {
  switch (s->dtype) {
    case DType::kF8E8M0: return e8m0_to_f32(s->data[i]);
    case DType::kF32: {
      float v;
      std::memcpy(&v, s->data + 4 * i, 4);
      return v;
    }
    case DType::kBF16: {
      uint16_t v;
      std::memcpy(&v, s->data + 2 * i, 2);
      return bf16_to_f32(v);
    }
    default: return NAN;
  }
}

}  // namespace

StatusOr<std::optional<ReleasedLinear>> released_linear(const Checkpoint& ckpt, const std::string& name) {
  if (!ends_with(name, ".weight")) return std::optional<ReleasedLinear>();
  const std::string prefix = name.substr(0, name.size() - 7);
  const TensorInfo* w = ckpt.find(name);
  const TensorInfo* s = ckpt.find(prefix + ".scale");
  if (!w || !s || w->shape.size() != 2) return std::optional<ReleasedLinear>();
  const bool fp8 = w->dtype == DType::kF8E4M3, fp4 = w->dtype == DType::kI8 || w->dtype == DType::kU8;
  if (!fp8 && !fp4) return std::optional<ReleasedLinear>();
  ReleasedLinear q{w, s, fp4, w->shape[0], w->shape[1] * (fp4 ? 2 : 1)};
  const int64_t want = fp4 ? q.out * (q.in / 32) : ((q.out + 127) / 128) * ((q.in + 127) / 128);
  if (s->numel() != want || (fp4 && q.in % 32))
    return data_loss("tensor '" + prefix + ".scale' in " + *s->file + " has shape " + s->shape_string() +
                     ", which does not fit weight " + w->shape_string());
  if (s->dtype != DType::kF8E8M0 && s->dtype != DType::kF32 && s->dtype != DType::kBF16)
    return data_loss("tensor '" + prefix + ".scale' in " + *s->file + " is " + dtype_name(s->dtype) +
                     ", expected F8_E8M0, F32 or BF16");
  return std::optional<ReleasedLinear>(q);
}

void dequantize_row(const ReleasedLinear& q, int64_t r, float* row) {
  if (q.fp4) {
    for (int64_t c = 0; c < q.in; ++c) {
      const uint8_t byte = q.weight->data[r * (q.in / 2) + c / 2];
      row[c] = e2m1_to_f32((c & 1) ? byte >> 4 : byte & 0xF) * scale_at(q.scale, r * (q.in / 32) + c / 32);
    }
    return;
  }
  const int64_t sc = (q.in + 127) / 128;
  for (int64_t c = 0; c < q.in; ++c)
    row[c] = e4m3_to_f32(q.weight->data[r * q.in + c]) * scale_at(q.scale, (r / 128) * sc + c / 128);
}

}  // namespace dsv4
