// Which kernels run. Two choices pick them, in one place:
//  - the instruction set: the best this CPU has, chosen once at start-up
//    (DSV4_ISA=generic|avx2|avx512 overrides). Each ISA's kernels live in
//    their own translation units built for it (src/kernels/avx2,
//    src/kernels/avx512); everything else is built for baseline x86-64, so
//    one binary runs on any x86-64 CPU and uses what it finds.
//  - the numerics, a model's option: kExact reproduces the reference's
//    float operations one by one (its summation order, no FMA), bit for bit;
//    kFast may use FMA, any summation order and blocking, and fused
//    dequantization, within per-op tolerances (tests/test_ops.cc). Fast
//    kernels still order each output's sums by that output's own data only,
//    never by the batch or thread count, so results do not depend on what
//    else is in a batch.
// A table holds, per kernel, the chosen ISA's body for those numerics, or
// the next best (the ISA's exact body, the generic fast one, the generic
// exact one, which is the oracle every other body is tested against).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cache_rows.h"
#include "kernels/kernels.h"

namespace dsv4::kernels {

enum class Isa { kGeneric, kAvx2, kAvx512 };
enum class Numerics { kExact, kFast };

Isa active_isa();
const char* isa_name(Isa isa);
bool isa_supported(Isa isa);
// For tests: runs the kernels on `isa` from now on (must be supported).
void set_isa(Isa isa);

const char* numerics_name(Numerics n);  // "exact", "fast"
// "exact" or "fast"; false for anything else.
bool parse_numerics(const std::string& name, Numerics* out);
// DSV4_NUMERICS when set (and valid), else `fallback`.
Numerics numerics_from_env(Numerics fallback);

struct Kernels {
  Isa isa = Isa::kGeneric;
  Numerics numerics = Numerics::kExact;

  // y[i, j] = x[i] . w[j] for rows [0, m) and the output columns of panels
  // [p_begin, p_end) (j < n), y with row stride ldy; the weights packed in
  // panels (kernels.h): f32, or BF16/FP8/FP4 codes with their scales.
  void (*matmul_f32)(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, int64_t p_begin,
                     int64_t p_end, float* y, int64_t ldy) = nullptr;
  void (*matmul_quantized)(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n,
                           int64_t p_begin, int64_t p_end, float* y, int64_t ldy) = nullptr;
  // The same with inputs that are exact BF16 values, as pairs
  // (pack_bf16_pairs): every FP8/FP4 linear's rounded input.
  void (*matmul_quantized_pairs)(const uint32_t* pairs, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n,
                                 int64_t p_begin, int64_t p_end, float* y, int64_t ldy) = nullptr;
  // W8A8: x [m, k] -> biased uint8 [m, int8_padded_k(k)] and row scales [m];
  // then the int8 panels (kernels.h).
  void (*quantize_rows_int8)(const float* x, int64_t m, int64_t k, uint8_t* biased, float* row_scales) = nullptr;
  void (*matmul_int8)(const uint8_t* biased, const float* row_scales, int64_t m, int64_t k, const Int8Panels& w,
                      int64_t n, int64_t p_begin, int64_t p_end, float* y, int64_t ldy) = nullptr;

  // x[i] = silu(x[i]) in place, x being elements [index0, index0 + n) of a
  // tensor of `total` elements: silu_at, exact in both numerics.
  void (*silu)(float* x, int64_t n, int64_t index0, int64_t total) = nullptr;
  // In place round trips through FP8 e4m3 / FP4 e2m1 per `block` values
  // (the reference's act_quant / fp4_act_quant, see kernels.h).
  void (*fp8_round_trip)(float* x, int64_t n, int64_t block) = nullptr;
  void (*fp4_round_trip)(float* x, int64_t n, int64_t block) = nullptr;
  // In place normalized Walsh-Hadamard transform (n a power of two);
  // scratch: n floats.
  void (*hadamard)(float* x, int64_t n, float* scratch) = nullptr;

  // A KV row rounded and stored as its codes (cache_rows.h).
  void (*store_kv_row)(const float* x, const KvRowFormat& f, uint8_t* row) = nullptr;
  // Sink attention of `heads` query heads sharing key slots of KV rows
  // (kernels.h); scratch: sink_attention_scratch floats.
  void (*sink_attention_heads)(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots,
                               const KvRowFormat& f, const float* sinks, float scale, float* scratch,
                               float* out) = nullptr;
  // sink_attention_heads in two steps, so that one query row's attention
  // can be split among threads: the scores of `heads` heads against key
  // slots [0, num_slots) (any block of a row's slots) to scores[h * stride
  // + j], -inf for a masked slot; then, from the heads' whole score rows
  // and their sinks, the weights and the weighted sum of dimensions
  // [d0, d1) of the rows (d0, d1 multiples of 16, or d1 the row's dim) to
  // out[h * out_stride + d - d0]. Together they give sink_attention_heads's
  // bits however the slots, heads and dimensions are cut. scratch: for the
  // scores sink_attention_scratch(0, 0, dim) floats, for the sums
  // sink_attention_scratch(heads, num_slots, dim).
  void (*sink_scores)(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots,
                      const KvRowFormat& f, float scale, float* scratch, float* scores, int64_t stride) = nullptr;
  void (*sink_weighted_sum)(const float* scores, int64_t heads, int64_t stride, const uint8_t* const* keys,
                            int64_t num_slots, const KvRowFormat& f, const float* sinks, int64_t d0, int64_t d1,
                            float* scratch, float* out, int64_t out_stride) = nullptr;
  // dots[j * heads + h] = q[h] . key_j over index key rows (kernels.h);
  // scratch: head_dots_scratch floats.
  void (*head_dots)(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_keys, int64_t dim,
                    float* scratch, float* dots) = nullptr;
  // One K block of n <= 32 inputs of DeepSeek-V4.1's linear (model/
  // v41_linear.h) for kPanel output rows side by side: tile [n][kPanel] the
  // rows' weights transposed, a the m input rows at the block (row stride
  // lda), acc [m][kPanel]. Block-scaled (wscale non-null): per row r the
  // block's products summed in input order, times sx[r], times wscale[j],
  // added to acc; else each product added to acc in input order.
  void (*v41_block)(const float* a, int64_t lda, int64_t m, const float* tile, int64_t n, const float* sx,
                    const float* wscale, float* acc) = nullptr;
  // DeepSeek-V4.1's sparse_attn for one query row: `heads` heads of q
  // [heads, dim] over the n KV rows kv[j] (null: an unused index) in blocks
  // of 64 with an online softmax from -1e30 (every score a left-to-right
  // dot times scale), the sinks joining the denominator; out [heads, dim].
  void (*v41_sparse_attention)(const float* q, int64_t heads, int64_t dim, const float* const* kv, int64_t n,
                               const float* sinks, float scale, float* out) = nullptr;
};

// The one dispatch point: the kernels for `numerics` on the active ISA.
const Kernels& kernels_for(Numerics numerics);
// On a given ISA (tests; it must be supported).
const Kernels& kernels_for(Isa isa, Numerics numerics);

}  // namespace dsv4::kernels
