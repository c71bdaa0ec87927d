#include "kernels/cache_rows.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "base/dtype.h"
#include "kernels/generic/generic_kernels.h"
#include "kernels/kernels.h"

namespace dsv4::kernels {
namespace {

// The e8m0 byte of a power-of-two scale: its biased exponent (0xFF, NaN,
// for a scale that overflowed).
uint8_t e8m0_of(float pow2) { return static_cast<uint8_t>(std::bit_cast<uint32_t>(pow2) >> 23); }

}  // namespace

void generic::store_kv_row(const float* x, const KvRowFormat& f, uint8_t* row) {
  for (int64_t b = 0; b < f.nope; b += kKvScaleBlock) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + kKvScaleBlock; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float scale = fp8_block_scale(amax);
    for (int64_t i = b; i < b + kKvScaleBlock; ++i)
      row[i] = f32_to_e4m3(x[i] / scale);  // clamped to +-448, ties to even
    row[f.scale_offset() + b / kKvScaleBlock] = e8m0_of(scale);
  }
  std::memcpy(row + f.rope_offset(), x + f.nope, sizeof(float) * f.rope);
}

void load_kv_row(const uint8_t* row, const KvRowFormat& f, float* x) {
  for (int64_t b = 0; b < f.nope; b += kKvScaleBlock) {
    const float scale = e8m0_to_f32(row[f.scale_offset() + b / kKvScaleBlock]);
    for (int64_t i = b; i < b + kKvScaleBlock; ++i) x[i] = e4m3_to_f32(row[i]) * scale;
  }
  std::memcpy(x + f.nope, row + f.rope_offset(), sizeof(float) * f.rope);
}

void store_index_row(const float* x, int64_t dim, uint8_t* row) {
  uint8_t* scales = row + dim / 2;
  for (int64_t b = 0; b < dim; b += kIndexScaleBlock) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + kIndexScaleBlock; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float scale = fp4_block_scale(amax);
    for (int64_t i = b; i < b + kIndexScaleBlock; i += 2)
      row[i / 2] = static_cast<uint8_t>(f32_to_e2m1(x[i] / scale) | f32_to_e2m1(x[i + 1] / scale) << 4);
    scales[b / kIndexScaleBlock] = e8m0_of(scale);
  }
}

void load_index_row(const uint8_t* row, int64_t dim, float* x) {
  const uint8_t* scales = row + dim / 2;
  for (int64_t i = 0; i < dim; ++i) {
    const uint8_t nibble = i % 2 ? row[i / 2] >> 4 : row[i / 2] & 0xF;
    x[i] = e2m1_to_f32(nibble) * e8m0_to_f32(scales[i / kIndexScaleBlock]);
  }
}

}  // namespace dsv4::kernels
