// The AVX-512 kernel bodies (F, BW, VL, DQ, VBMI, BF16, VNNI), built for
// that instruction set alone; register.cc offers them to the dispatch table.
// Semantics: dispatch.h. Shapes a body does not cover go to the generic one.
#pragma once

#include <cstdint>

#include "kernels/cache_rows.h"
#include "kernels/kernels.h"

namespace dsv4::kernels::avx512 {

// Exact numerics: the reference's operations and order, bit-identical to
// the generic bodies.
void matmul_f32(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, int64_t p_begin, int64_t p_end,
                float* y, int64_t ldy);
void matmul_quantized(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                      int64_t p_end, float* y, int64_t ldy);
void matmul_quantized_pairs(const uint32_t* pairs, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n,
                            int64_t p_begin, int64_t p_end, float* y, int64_t ldy);
// FP8/FP4 panels (the body of matmul_quantized for those formats).
void matmul_chunked(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                    int64_t p_end, float* y, int64_t ldy);
void quantize_rows_int8(const float* x, int64_t m, int64_t k, uint8_t* biased, float* row_scales);
void matmul_int8(const uint8_t* biased, const float* row_scales, int64_t m, int64_t k, const Int8Panels& w, int64_t n,
                 int64_t p_begin, int64_t p_end, float* y, int64_t ldy);
void silu(float* x, int64_t n, int64_t index0, int64_t total);
void fp8_round_trip(float* x, int64_t n, int64_t block);
void hadamard(float* x, int64_t n, float* scratch);
void store_kv_row(const float* x, const KvRowFormat& f, uint8_t* row);
void v41_block(const float* a, int64_t lda, int64_t m, const float* tile, int64_t n, const float* sx,
               const float* wscale, float* acc);
void v41_sparse_attention(const float* q, int64_t heads, int64_t dim, const float* const* kv, int64_t n,
                          const float* sinks, float scale, float* out);
void v41_sparse_attention_fast(const float* q, int64_t heads, int64_t dim, const float* const* kv, int64_t n,
                               const float* sinks, float scale, float* out);
void sink_attention_heads(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots,
                          const KvRowFormat& f, const float* sinks, float scale, float* scratch, float* out);
void sink_scores(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots, const KvRowFormat& f,
                 float scale, float* scratch, float* scores, int64_t stride);
void sink_weighted_sum(const float* scores, int64_t heads, int64_t stride, const uint8_t* const* keys, int64_t num_slots,
                       const KvRowFormat& f, const float* sinks, int64_t d0, int64_t d1, float* scratch, float* out,
                       int64_t out_stride);
void head_dots(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_keys, int64_t dim,
               float* scratch, float* dots);

// Fast numerics: fused multiply-adds, sums in any order of the output's own
// data (dispatch.h).
void matmul_f32_fast(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, int64_t p_begin,
                     int64_t p_end, float* y, int64_t ldy);
void matmul_quantized_fast(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                           int64_t p_end, float* y, int64_t ldy);
void matmul_chunked_fast(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                         int64_t p_end, float* y, int64_t ldy);
void matmul_quantized_pairs_fast(const uint32_t* pairs, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n,
                                 int64_t p_begin, int64_t p_end, float* y, int64_t ldy);
void sink_attention_heads_fast(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots,
                               const KvRowFormat& f, const float* sinks, float scale, float* scratch, float* out);
void sink_scores_fast(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots, const KvRowFormat& f,
                 float scale, float* scratch, float* scores, int64_t stride);
void sink_weighted_sum_fast(const float* scores, int64_t heads, int64_t stride, const uint8_t* const* keys, int64_t num_slots,
                       const KvRowFormat& f, const float* sinks, int64_t d0, int64_t d1, float* scratch, float* out,
                       int64_t out_stride);
// The indexer's dots on the VNNI byte dot products (index_dots.cc), and the
// f32 FMA body it falls back to for queries that are not FP4.
void head_dots_fast(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_keys, int64_t dim,
                    float* scratch, float* dots);
void head_dots_fused(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_keys, int64_t dim,
                     float* scratch, float* dots);

}  // namespace dsv4::kernels::avx512
