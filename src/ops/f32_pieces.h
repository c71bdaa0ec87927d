// Small f32 products summed in pieces of their inputs, fast numerics' way
// of keeping a many-core node busy on a product with few outputs: the
// mHC mixes (24 outputs of 4 x 4096 inputs) and routing's gate (256 outputs
// of 4096). Whole, such a product is a tile a panel of 16 outputs, two or
// sixteen tiles for 64 workers; in pieces of kF32Piece inputs it is a tile
// a piece and panel, and each output adds its pieces in order afterwards.
// A row's outputs depend on its own inputs only, and the pieces are the
// same at any batch size and pool size: batch-invariant, but not the
// reference's one left-to-right sum, so exact numerics keep that.
#pragma once

#include <algorithm>
#include <cstdint>

#include "base/scratch.h"
#include "base/thread_pool.h"
#include "base/work_meter.h"
#include "kernels/kernels.h"
#include "ops/linear.h"

namespace dsv4 {

inline constexpr int64_t kF32Piece = 512;
// Rows a tile takes (prefill's thousands of rows in blocks).
inline constexpr int64_t kF32PieceRowBlock = 32;

// Whether fn (inputs `in`) sums in pieces: fast numerics, f32 panels, and
// whole pieces.
inline bool f32_in_pieces(const kernels::Kernels& k, const Linear& fn, int64_t in) {
  return k.numerics == kernels::Numerics::kFast && in % kF32Piece == 0 && !fn.panels.empty() &&
         fn.code_panels.empty();
}

// part [pieces][rows][outputs]: each piece's share of fn's outputs for
// every row, inputs `in`, in one job; a tile is a block of rows x a piece x
// a panel. source(r0, n, q, p, buffer) gives piece q of rows [r0, r0 + n),
// the rows kF32Piece apart (in buffer, or in place for one row); tile_of
// (q, r0, n, x) hears each piece of a row block once (its first panel's
// tile), with those rows' piece.
template <class Source, class OnPiece>
void f32_pieces(const kernels::Kernels& k, const Linear& fn, int64_t in, int64_t rows, Source source,
                OnPiece on_piece, ScratchVector<float>* part) {
  const int64_t outputs = fn.out, pieces = in / kF32Piece;
  const int64_t blocks = (rows + kF32PieceRowBlock - 1) / kF32PieceRowBlock;
  const int64_t panels = (outputs + kernels::kPanel - 1) / kernels::kPanel;
  part->resize(pieces * rows * outputs);
  float* out = part->data();
  parallel_for(blocks * pieces * panels, 1, [&](int64_t a, int64_t b) {
    thread_local ScratchVector<float> gathered;  // kept: a task every piece
    for (int64_t u = a; u < b; ++u) {
      const int64_t p = u % panels, q = u / panels % pieces, r0 = u / panels / pieces * kF32PieceRowBlock;
      const int64_t n = std::min(rows - r0, kF32PieceRowBlock);
      const float* x = source(r0, n, q, p, gathered);
      if (p == 0) on_piece(q, r0, n, x);
      const float* w = fn.panels.data() + (p * in + q * kF32Piece) * kernels::kPanel;
      meter_read(w, static_cast<int64_t>(sizeof(float)) * kF32Piece * kernels::kPanel);
      k.matmul_f32(x, n, kF32Piece, w, std::min(kernels::kPanel, outputs - p * kernels::kPanel), 0, 1,
                   &out[(q * rows + r0) * outputs + p * kernels::kPanel], outputs);
    }
  });
}

// Piece q of rows [r0, r0 + n) of x [rows, in] as it is stored.
inline auto stored_f32_pieces(const float* x, int64_t in) {
  return [x, in](int64_t r0, int64_t n, int64_t q, int64_t, ScratchVector<float>& buffer) {
    const float* at = x + r0 * in + q * kF32Piece;
    if (n == 1) return at;
    buffer.resize(n * kF32Piece);
    for (int64_t r = 0; r < n; ++r) std::copy_n(at + r * in, kF32Piece, buffer.data() + r * kF32Piece);
    return static_cast<const float*>(buffer.data());
  };
}

// Row r's outputs from part (f32_pieces'): the pieces added in order.
inline void add_f32_pieces(const float* part, int64_t pieces, int64_t rows, int64_t outputs, int64_t r, float* y) {
  std::copy_n(part + r * outputs, outputs, y);
  for (int64_t q = 1; q < pieces; ++q) {
    const float* pq = part + (q * rows + r) * outputs;
    for (int64_t j = 0; j < outputs; ++j) y[j] += pq[j];
  }
}

}  // namespace dsv4
