#include "kernels/avx512/avx512_kernels.h"
#include "kernels/registry.h"

namespace dsv4::kernels::avx512 {
namespace {

// The exact bodies (the fast table starts from them).
void set_exact(Kernels* k) {
  k->matmul_f32 = &matmul_f32;
  k->matmul_quantized = &matmul_quantized;
  k->matmul_quantized_pairs = &matmul_quantized_pairs;
  k->quantize_rows_int8 = &quantize_rows_int8;
  k->matmul_int8 = &matmul_int8;
  k->silu = &silu;
  k->fp8_round_trip = &fp8_round_trip;
  k->hadamard = &hadamard;
  k->store_kv_row = &store_kv_row;
  k->sink_attention_heads = &sink_attention_heads;
  k->sink_scores = &sink_scores;
  k->sink_weighted_sum = &sink_weighted_sum;
  k->head_dots = &head_dots;
  k->v41_block = &v41_block;
  k->v41_sparse_attention = &v41_sparse_attention;
}

}  // namespace

void register_kernels(Kernels* exact, Kernels* fast) {
  set_exact(exact);
  set_exact(fast);
  fast->matmul_f32 = &matmul_f32_fast;
  fast->matmul_quantized = &matmul_quantized_fast;
  fast->matmul_quantized_pairs = &matmul_quantized_pairs_fast;
  fast->sink_attention_heads = &sink_attention_heads_fast;
  fast->sink_scores = &sink_scores_fast;
  fast->sink_weighted_sum = &sink_weighted_sum_fast;
  fast->head_dots = &head_dots_fast;
  fast->v41_sparse_attention = &v41_sparse_attention_fast;
}

}  // namespace dsv4::kernels::avx512
