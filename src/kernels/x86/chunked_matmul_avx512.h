// FP8 / FP4 chunked panels against f32 inputs on AVX-512 (the body of
// matmul_quantized_avx512 for those formats).
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace dsv4::kernels {

void matmul_chunked_avx512(const float* x, int64_t m, int64_t k, const QuantizedPanels& w, int64_t n, int64_t p_begin,
                           int64_t p_end, float* y, int64_t ldy);

}  // namespace dsv4::kernels
