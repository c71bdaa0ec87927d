// Pointer+size kernels: the weight layouts they share, and the exact scalar
// math the reference's PyTorch CPU kernels do. The kernels themselves are
// reached through dispatch.h (one table per ISA and numerics); the generic
// bodies (src/kernels/generic) are the oracle every other body is tested
// against. No shape checks, no allocation, no threads: ops (src/ops)
// validate shapes and split work with parallel_for.
#pragma once

#include <cstdint>

#include "kernels/cache_rows.h"

namespace dsv4::kernels {

// Exact numerics follow the reference's PyTorch CPU kernels operation by
// operation (products rounded before adding, no FMA contraction, the same
// summation order), so f32 results are bit-identical to the reference's.

// e^x and log(1 + x) as the reference's vectorized kernels compute them
// (SLEEF expf / log1pf, 1 ULP). PyTorch's elementwise loops run blocks of
// 16 elements through the vector op and the last n % 16 of a contiguous
// tensor through the scalar op, which calls libm: simd_element says which.
float vexp(float x);
float vlog1p(float x);
inline bool simd_element(int64_t index, int64_t n) { return index < n / 16 * 16; }

// sigmoid, silu (x * sigmoid(x)) and softplus (threshold 20) of element
// `index` of an n-element tensor, as the reference's loops compute them.
float sigmoid_at(float x, int64_t index, int64_t n);
float silu_at(float x, int64_t index, int64_t n);
float softplus_at(float x, int64_t index, int64_t n);

// sum_i a[i] * b[i], added left to right (PyTorch's fallback GEMM order).
float dot(const float* a, const float* b, int64_t n);

// sum_i x[i] and sum_i x[i]^2 in PyTorch's reduction order (8 lanes, 4-way
// interleave, cascaded every 16 rows).
float sum(const float* x, int64_t n);
float sum_squares(const float* x, int64_t n);

// The first index of the largest of x[0, n), as a left-to-right scan
// keeping each strictly larger value finds it: a NaN is never larger, and
// a NaN first value stays (index 0); -0 and +0 are equal. 0 when n is 0.
int64_t first_largest(const float* x, int64_t n);

// sum_i x[i * stride]: PyTorch's order for a sum over an outer dimension
// (a cascade over the rows; exact for columns in its 32-wide blocks).
float sum_outer(const float* x, int64_t n, int64_t stride);

// y[i, j] = dot(x[i], w[j]) for rows i in [0, m) and output columns
// j in [n_begin, n_end). y has row stride ldy.
void matmul_nt(const float* x, int64_t m, int64_t k, const float* w, int64_t n_begin, int64_t n_end,
               float* y, int64_t ldy);

// out = x / sqrt(mean(x^2) + eps) * weight (weight may be null: no scale).
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out);

// Rotates interleaved pairs (x[2i], x[2i+1]) by angle i: cos[i], sin[i];
// inverse rotates by the negative angle.
void rope(float* x, const float* cos, const float* sin, int64_t pairs, bool inverse);

// The reference's act_quant / fp4_act_quant round trips, in place, per
// blocks of `block` values: each block gets a power-of-two scale
// (2^ceil(log2(amax / max))), values are divided by it, clamped to +-max
// (448 for FP8 e4m3, 6 for FP4 e2m1), rounded to the format (ties to even)
// and scaled back. The dispatched fp8_round_trip / fp4_round_trip are these.
void fp8_quant_dequant(float* x, int64_t n, int64_t block);
void fp4_quant_dequant(float* x, int64_t n, int64_t block);
// The block scales for a block's amax (floored at 1e-4 for FP8 and
// 6 * 2^-126 for FP4, as the reference).
float fp8_block_scale(float amax);
float fp4_block_scale(float amax);

// Weights packed for output-column vectors: panels of kPanel output columns,
// each stored k-major ([k][kPanel]), the last panel zero-padded. Each
// output still adds its products left to right, so matmul_f32 (dispatch.h)
// equals matmul_nt bit for bit in exact numerics, while a vector unit
// computes kPanel outputs at once.
inline constexpr int64_t kPanel = 16;
inline int64_t packed_floats(int64_t n, int64_t k) { return (n + kPanel - 1) / kPanel * kPanel * k; }
void pack_panels(const float* w, int64_t n, int64_t k, float* packed);

// BF16, FP8 e4m3 and FP4 e2m1 weights kept in their formats, FP8/FP4 with an
// e8m0 scale per row and block of the input (128 values for FP8, 32 for
// FP4 and for kFp8Block32, DeepSeek-V4.1's [32, 32] tiles one row at a
// time). A weight is its code's value times its scale (one exact multiply, as
// the reference dequantizes), so matmul_quantized equals matmul_nt on the
// dequantized weights bit for bit in exact numerics.
//
// Layout, per panel of kPanel columns: BF16 codes [k][16] x 2 bytes. FP8 and
// FP4 codes in 64-byte chunks of 4 (FP8) or 8 (FP4) input steps, arranged so
// that table lookups turn a chunk into BF16 pair vectors (FP8: a byte
// permute and one byte interleave; FP4: a word permute per nibble): 32
// words, column c's steps (t, t + 1) in words (2c + 1, 2c) (code_position
// says where each code lives). Scales [k / block][16] bytes.
enum class PanelFormat { kF32, kBf16, kFp8, kFp4, kFp8Block32 };
inline constexpr bool is_fp8(PanelFormat f) { return f == PanelFormat::kFp8 || f == PanelFormat::kFp8Block32; }
inline constexpr int64_t kChunkBytes = 64;
int64_t panel_block(PanelFormat f);  // input values per scale: 128 (kFp8), 32 (kFp4, kFp8Block32)
int64_t chunk_steps(PanelFormat f);  // input steps per 64-byte chunk: 4 (FP8), 8 (FP4); k must be a multiple
struct CodePosition {
  int64_t byte;  // offset in the panels
  int nibble;    // FP4: 0 low, 1 high
};
CodePosition code_position(PanelFormat f, int64_t k, int64_t p, int64_t t, int64_t c);
// Whether an e8m0 scale keeps every code times it a normal float (real
// checkpoints' scales do; loaders reject others).
bool scale_in_kernel_range(uint8_t e8m0);
int64_t packed_code_bytes(PanelFormat f, int64_t n, int64_t k);
int64_t packed_scale_bytes(PanelFormat f, int64_t n, int64_t k);
// codes: [n, k] one code per byte (an FP4 nibble in the low 4 bits; BF16:
// two bytes, little-endian); scales: [n, k / block] e8m0 (none for BF16).
void pack_quantized_panels(PanelFormat f, const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k,
                           uint8_t* packed_codes, uint8_t* packed_scales);
// The same panels straight from the checkpoint's layout, what the loader
// uses as it reads rows (pack_quantized_panels is the per-code oracle):
// stored codes [n, k] bytes (FP8), [n, k / 2] two per byte, low nibble
// first (FP4), or [n, k] little-endian halves (BF16); scales [n, k / block]
// e8m0. n rows fill panels from the first, so rows [16 i, 16 i + n) pack
// into the panels of index i onward.
void pack_stored_codes(PanelFormat f, const uint8_t* stored, int64_t n, int64_t k, uint8_t* packed_codes);
void pack_row_scales(PanelFormat f, const uint8_t* scales, int64_t n, int64_t k, uint8_t* packed_scales);
struct QuantizedPanels {
  PanelFormat format;
  const uint8_t* codes;
  const uint8_t* scales;
};
// Weight (t, column c) of panel p, dequantized.
float panel_weight(const QuantizedPanels& w, int64_t k, int64_t p, int64_t t, int64_t c);

// Inputs that are exact BF16 values (every FP8/FP4 linear rounds its input
// through e4m3 first, and e4m3 times a power of two fits BF16) as pairs:
// dword t / 2 of a row holds step t in its high half and t + 1 in its low
// half (k even). Products of two such values are exact in f32, so a BF16 dot
// product that adds the high pair's product first and then the low one's
// (VDPBF16PS does) rounds exactly as the reference's left-to-right sum:
// matmul_quantized_pairs equals matmul_quantized on the same values bit for
// bit (BF16 dot products treat subnormal inputs and sums as zero; these
// values never come near 2^-126).
void pack_bf16_pairs(const float* x, int64_t m, int64_t k, uint32_t* pairs);

// W8A8 (compressed-tensors int-quantized): int8 weights with an f32 scale
// per output channel, against activations quantized per row to int8 with
// a symmetric dynamic scale (amax / 127, round to nearest even). Panels of
// kPanel columns hold [k / 4][16][4] int8 (k padded to a multiple of 4 with
// zeros), then per panel 16 int32 column sums and 16 f32 scales. The kernels
// take activations biased to uint8 (q + 128: VNNI multiplies unsigned by
// signed bytes) and subtract 128 x the column sum; integer sums are exact,
// and y = float(sum) * row scale * channel scale in that order.
int64_t int8_padded_k(int64_t k);
int64_t int8_code_bytes(int64_t n, int64_t k);
int64_t int8_panel_extra_bytes(int64_t n);
void pack_int8_panels(const int8_t* codes, const float* channel_scales, int64_t n, int64_t k, uint8_t* packed_codes,
                      uint8_t* sums_and_scales);
struct Int8Panels {
  const uint8_t* codes;
  const uint8_t* sums_and_scales;
};

// Input steps per slice of a blocked GEMM (AVX2's, and AVX-512's over
// FP8/FP4 panels): with more rows than one register block, 256 (4 panels'
// slice decoded fills 32 KiB, which every row block multiplies from L1;
// AVX-512's F32/BF16 panels take longer slices); with one block, all of k, so
// each panel is one sequential stream (what the hardware prefetcher follows
// best in decode).
inline int64_t slice_steps(int64_t m, int64_t k) { return m <= 4 ? k : 256; }

// Sink attention (dispatch.h) of `heads` query heads (q [heads, dim], out
// [heads, dim], sinks [heads]) sharing the same key slots, as in
// DeepSeek-V4's one-KV-head attention: softmax(q.k * scale) with one more
// logit per head, its sink, in the denominator only; out = sum_j p_j *
// key_j. keys[j] is a KV row in format f (the codes the cache stores, see
// cache_rows.h), or null for a masked slot (weight 0, still part of the
// softmax sum's layout in exact numerics). The rows are decoded as they are
// read, kKeyTile at a time.
inline constexpr int64_t kKeyTile = 8;
int64_t sink_attention_scratch(int64_t heads, int64_t num_slots, int64_t dim);
// The softmax step: scores (logits, -inf for masked slots) become
// exp(score - max); returns the denominator with the sink.
float sink_softmax(const uint8_t* const* keys, int64_t num_slots, float sink, float* scores);
// The indexer's dots (dispatch.h): index key rows (FP4 codes), none null.
int64_t head_dots_scratch(int64_t heads, int64_t dim);

}  // namespace dsv4::kernels
