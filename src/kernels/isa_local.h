// Small helpers for the ISA translation units (src/kernels/avx2,
// src/kernels/avx512). Everything here has internal linkage, so each unit
// keeps its own copy built with its own instruction set. Those units use no
// std:: templates either: the linker keeps one copy of an inline template
// for the whole program, and a copy built for AVX-512 would then run on
// CPUs without it (scripts/check_isa.sh looks for exactly that).
#pragma once

#include <cstdint>

namespace dsv4::kernels {
namespace {

inline int64_t lesser(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t greater(int64_t a, int64_t b) { return a > b ? a : b; }

inline void fill_floats(float* p, int64_t n, float v) {
  for (int64_t i = 0; i < n; ++i) p[i] = v;
}

// Zeroes outputs [i, j] for rows [0, m) and the columns of panels
// [p_begin, p_end) (j < n): what a product over k = 0 steps gives.
inline void zero_outputs(int64_t m, int64_t n, int64_t panel, int64_t p_begin, int64_t p_end, float* y, int64_t ldy) {
  for (int64_t i = 0; i < m; ++i)
    fill_floats(y + i * ldy + p_begin * panel, lesser(n, p_end * panel) - p_begin * panel, 0.0f);
}

}  // namespace
}  // namespace dsv4::kernels
