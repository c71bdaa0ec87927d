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

// A V4.1 row's scale is recomputed from its rounded values: the largest is
// the scale times a top code (or the floor decides it), which gives the
// rounding's own scale or, for a power of two, half of it, under which
// every code still has an exact double.
void store_v41_window_row(const float* x, int64_t dim, uint8_t* row) {
  uint8_t* scales = row + dim;
  for (int64_t b = 0; b < dim; b += kV41WindowScaleBlock) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + kV41WindowScaleBlock; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float scale = pow2_ceil(std::fmax(amax, 1e-4f) * (1.0f / kE4M3Max));
    for (int64_t i = b; i < b + kV41WindowScaleBlock; ++i) row[i] = f32_to_e4m3(x[i] / scale);
    scales[b / kV41WindowScaleBlock] = e8m0_of(scale);
  }
}

void load_v41_window_row(const uint8_t* row, int64_t dim, float* x) {
  const uint8_t* scales = row + dim;
  for (int64_t i = 0; i < dim; ++i) x[i] = e4m3_to_f32(row[i]) * e8m0_to_f32(scales[i / kV41WindowScaleBlock]);
}

void store_v41_compressed_row(const float* x, int64_t dim, uint8_t* row) {
  uint8_t* scales = row + dim / 2;
  const float min_amax = kE2M1Max * std::ldexp(1.0f, -9);
  for (int64_t b = 0; b < dim; b += kV41CompressedScaleBlock) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + kV41CompressedScaleBlock; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const uint8_t code = f32_to_e4m3(std::fmax(amax, min_amax) / kE2M1Max);
    const float scale = e4m3_to_f32(code);
    for (int64_t i = b; i < b + kV41CompressedScaleBlock; i += 2)
      row[i / 2] = static_cast<uint8_t>(f32_to_e2m1(x[i] / scale) | f32_to_e2m1(x[i + 1] / scale) << 4);
    scales[b / kV41CompressedScaleBlock] = code;
  }
}

void load_v41_compressed_row(const uint8_t* row, int64_t dim, float* x) {
  const uint8_t* scales = row + dim / 2;
  for (int64_t i = 0; i < dim; ++i) {
    const uint8_t nibble = i % 2 ? row[i / 2] >> 4 : row[i / 2] & 0xF;
    x[i] = e2m1_to_f32(nibble) * e4m3_to_f32(scales[i / kV41CompressedScaleBlock]);
  }
}

}  // namespace dsv4::kernels
