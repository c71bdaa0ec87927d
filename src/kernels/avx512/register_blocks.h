// The AVX-512 GEMMs compute in register blocks of up to 4 rows x 4 panels,
// each size a template instance: with_block picks the instance, and the
// blocks start and finish their sums alike.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/isa_local.h"
#include "kernels/kernels.h"

namespace dsv4::kernels::avx512 {

// Calls f.template operator()<R, P>() with R = rows and P = panels, each
// clamped to 1..4.
template <class F>
inline void with_block(int64_t rows, int64_t panels, F&& f) {
  auto with_rows = [&]<int R>() {
    switch (panels) {
      case 1: f.template operator()<R, 1>(); break;
      case 2: f.template operator()<R, 2>(); break;
      case 3: f.template operator()<R, 3>(); break;
      default: f.template operator()<R, 4>(); break;
    }
  };
  switch (rows) {
    case 1: with_rows.template operator()<1>(); break;
    case 2: with_rows.template operator()<2>(); break;
    case 3: with_rows.template operator()<3>(); break;
    default: with_rows.template operator()<4>(); break;
  }
}

// The columns of panel p that exist (n outputs in all).
inline __mmask16 panel_mask(int64_t n, int64_t p) {
  return static_cast<__mmask16>((1u << lesser(kPanel, n - p * kPanel)) - 1);
}

// The block's sums: zero, or the partial sums parked in y by the last
// slice; and back into y.
template <int R, int P>
inline void start_block(__m512 (&acc)[R][P], __mmask16 (&mask)[P], int64_t n, int64_t i, int64_t p, bool first,
                        const float* y, int64_t ldy) {
  for (int pp = 0; pp < P; ++pp) {
    mask[pp] = panel_mask(n, p + pp);
    for (int r = 0; r < R; ++r)
      acc[r][pp] = first ? _mm512_setzero_ps()
                         : _mm512_maskz_loadu_ps(mask[pp], y + (i + r) * ldy + (p + pp) * kPanel);
  }
}

template <int R, int P>
inline void finish_block(const __m512 (&acc)[R][P], const __mmask16 (&mask)[P], int64_t i, int64_t p, float* y,
                         int64_t ldy) {
  for (int r = 0; r < R; ++r)
    for (int pp = 0; pp < P; ++pp) _mm512_mask_storeu_ps(y + (i + r) * ldy + (p + pp) * kPanel, mask[pp], acc[r][pp]);
}

}  // namespace dsv4::kernels::avx512
