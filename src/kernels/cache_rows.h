// Cache rows stored as the codes the reference rounds them to. Its QAT steps
// put every cached key through a low-precision format before it is stored
// (the model was trained that way), so the codes hold exactly the values the
// reference attends to, at a third of the float32 bytes:
//
//   KV row (window ring, compressed rows): the first `nope` dims as FP8 e4m3
//   codes with an e8m0 scale per 64 of them, then the last `rope` dims as
//   float32 (the reference keeps the RoPE dims unrounded):
//       [nope codes][nope / 64 scales][pad to 4 bytes][rope x f32]
//   Index key row (the indexer's compressed keys): `dim` values as FP4 e2m1
//   codes, two per byte (low nibble first), with an e8m0 scale per 32:
//       [dim / 2 code bytes][dim / 32 scales]
//
// A value is its code's value times its block's power-of-two scale: one
// exact multiply, so a decoded row equals the reference's rounded row bit
// for bit.
#pragma once

#include <cstdint>

namespace dsv4::kernels {

inline constexpr int64_t kKvScaleBlock = 64;     // FP8 values per scale (the reference's act_quant block)
inline constexpr int64_t kIndexScaleBlock = 32;  // FP4 values per scale (fp4_act_quant)

struct KvRowFormat {
  int64_t nope = 0;  // FP8 dims, a multiple of kKvScaleBlock
  int64_t rope = 0;  // float32 dims
  int64_t dim() const { return nope + rope; }
  int64_t scale_offset() const { return nope; }
  int64_t rope_offset() const { return (nope + nope / kKvScaleBlock + 3) / 4 * 4; }
  int64_t bytes() const { return rope_offset() + 4 * rope; }
};

inline int64_t index_row_bytes(int64_t dim) { return dim / 2 + dim / kIndexScaleBlock; }

// Storing a KV row rounds x [f.dim()] as the reference's in-place act_quant
// does (per 64 values: scale 2^ceil(log2(amax / 448)), amax floored at
// 1e-4; e4m3 with ties to even, saturating) and keeps the RoPE dims as they
// are: Kernels::store_kv_row (dispatch.h). The values a KV row stands for:
void load_kv_row(const uint8_t* row, const KvRowFormat& f, float* x);
// Rounds x [dim] as fp4_act_quant does (per 32 values: scale
// 2^ceil(log2(amax / 6)), amax floored at 6 * 2^-126; e2m1) and stores it.
void store_index_row(const float* x, int64_t dim, uint8_t* row);
void load_index_row(const uint8_t* row, int64_t dim, float* x);

// DeepSeek-V4.1's rows (its reference rounds differently):
//   window row: all `dim` values as FP8 e4m3 codes with an e8m0 scale per
//   32 (act_quant(kv, 32) over the RoPE dims too):
//       [dim codes][dim / 32 scales]
//   compressed row: FP4 e2m1 codes, two per byte (low nibble first), with
//   an e4m3 scale per 16 (fp4_act_quant(x, 16, scale_dtype=e4m3)):
//       [dim / 2 code bytes][dim / 16 scales]
//   index key row: as V4's (FP4 with an e8m0 scale per 32).
// The forward rounds the values as the reference does (model/v41_linear.h)
// before storing them; storing such values and loading them gives them
// back exactly.
inline constexpr int64_t kV41WindowScaleBlock = 32;
inline constexpr int64_t kV41CompressedScaleBlock = 16;
inline int64_t v41_window_row_bytes(int64_t dim) { return dim + dim / kV41WindowScaleBlock; }
inline int64_t v41_compressed_row_bytes(int64_t dim) { return dim / 2 + dim / kV41CompressedScaleBlock; }
void store_v41_window_row(const float* x, int64_t dim, uint8_t* row);
void load_v41_window_row(const uint8_t* row, int64_t dim, float* x);
void store_v41_compressed_row(const float* x, int64_t dim, uint8_t* row);
void load_v41_compressed_row(const uint8_t* row, int64_t dim, float* x);

}  // namespace dsv4::kernels
