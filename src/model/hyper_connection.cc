#include "model/hyper_connection.h"

#include <algorithm>
#include <cmath>

#include "base/scratch.h"
#include "base/thread_pool.h"
#include "base/work_meter.h"
#include "kernels/kernels.h"
#include "ops/linear.h"

namespace dsv4 {
namespace {

// Fast numerics add each mix's products over the flattened streams in
// pieces of kMixPiece inputs (a tile a piece and panel), then the pieces in
// order; exact numerics keep the reference's one left-to-right sum a mix.
// A row's mixes depend on its own data only, so they are batch-invariant;
// and a decode step's single row keeps dozens of workers busy: streamed
// whole, the [24, hc*dim] f32 weight (1.5 MiB at Flash's shapes) would take
// one core a panel, two in all.
constexpr int64_t kMixPiece = 512;
constexpr int64_t kMixRowBlock = 32;

// Each piece's share of the mixes, part [pieces][rows][num_mixes] = fn h[r]
// over the piece, and of the squares, part_squares [pieces][rows]; a tile
// is a block of rows x a piece x a panel of outputs. source(r0, n, q, p,
// buffer) gives piece q of rows [r0, r0 + n), the rows kMixPiece apart (in
// buffer, or in place for one row).
template <class Source>
void piecewise_mixes(const kernels::Kernels& k, const Linear& fn, int64_t num_mixes, int64_t flat, int64_t rows,
                     Source source, ScratchVector<float>* part_mixes, ScratchVector<float>* part_squares_out) {
  const int64_t pieces = flat / kMixPiece, blocks = (rows + kMixRowBlock - 1) / kMixRowBlock;
  const int64_t panels = (num_mixes + kernels::kPanel - 1) / kernels::kPanel;
  ScratchVector<float>& part = *part_mixes;
  ScratchVector<float>& part_squares = *part_squares_out;
  part.resize(pieces * rows * num_mixes);
  part_squares.resize(pieces * rows);
  parallel_for(blocks * pieces * panels, 1, [&](int64_t a, int64_t b) {
    thread_local ScratchVector<float> gathered;  // kept: a task every piece
    for (int64_t u = a; u < b; ++u) {
      const int64_t p = u % panels, q = u / panels % pieces, r0 = u / panels / pieces * kMixRowBlock;
      const int64_t n = std::min(rows - r0, kMixRowBlock);
      const float* x = source(r0, n, q, p, gathered);
      if (p == 0)
        for (int64_t r = 0; r < n; ++r)
          part_squares[q * rows + r0 + r] = kernels::sum_squares(x + r * kMixPiece, kMixPiece);
      const float* w = fn.panels.data() + (p * flat + q * kMixPiece) * kernels::kPanel;
      meter_read(w, static_cast<int64_t>(sizeof(float)) * kMixPiece * kernels::kPanel);
      k.matmul_f32(x, n, kMixPiece, w, std::min(kernels::kPanel, num_mixes - p * kernels::kPanel), 0, 1,
                   &part[(q * rows + r0) * num_mixes + p * kernels::kPanel], num_mixes);
    }
  });
}

// Whether the mixes of fn sum in pieces (fast numerics).
bool mixes_in_pieces(const kernels::Kernels& k, const Linear& fn, const ModelConfig& c) {
  const int64_t flat = static_cast<int64_t>(c.hc_mult) * c.dim;
  return k.numerics == kernels::Numerics::kFast && flat % kMixPiece == 0 && !fn.panels.empty();
}

// Piece q of rows [r0, r0 + n) of the streams h as they are.
auto stored_pieces(const float* h, int64_t flat) {
  return [h, flat](int64_t r0, int64_t n, int64_t q, int64_t, ScratchVector<float>& buffer) {
    const float* x = h + r0 * flat + q * kMixPiece;
    if (n == 1) return x;
    buffer.resize(n * kMixPiece);
    for (int64_t r = 0; r < n; ++r) std::copy_n(x + r * flat, kMixPiece, buffer.data() + r * kMixPiece);
    return static_cast<const float*>(buffer.data());
  };
}

// mixes[r, m] = (fn[m] . h[r]) / rms(h[r]) over the flattened hc*dim
// stream, each row's then handed to finish(r, mixes of r) in one job over
// the rows, a task a row: the pieces' sums, the scaling and what the caller
// makes of the mixes. In pieces, source gives them (piecewise_mixes);
// otherwise h holds the streams.
template <class Source, class Finish>
void stream_mixes(const kernels::Kernels& k, const Linear& fn, int64_t num_mixes, const ModelConfig& c, const float* h,
                  int64_t rows, Source source, Finish finish) {
  const int64_t flat = static_cast<int64_t>(c.hc_mult) * c.dim;
  ScratchVector<float> mixes(rows * num_mixes), part, part_squares;
  const bool pieces = mixes_in_pieces(k, fn, c);
  if (pieces) piecewise_mixes(k, fn, num_mixes, flat, rows, source, &part, &part_squares);
  else linear_forward(k, fn, h, rows, mixes.data());
  parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* m = mixes.data() + r * num_mixes;
      float squares;
      if (pieces) {  // the pieces in order
        std::copy_n(&part[r * num_mixes], num_mixes, m);
        squares = part_squares[r];
        for (int64_t q = 1; q < flat / kMixPiece; ++q) {
          const float* pm = &part[(q * rows + r) * num_mixes];
          for (int64_t j = 0; j < num_mixes; ++j) m[j] += pm[j];
          squares += part_squares[q * rows + r];
        }
      } else {
        squares = kernels::sum_squares(h + r * flat, flat);
      }
      const float rs = 1.0f / std::sqrt(squares / static_cast<float>(flat) + c.norm_eps);
      for (int64_t j = 0; j < num_mixes; ++j) m[j] *= rs;
      finish(r, m);
    }
  });
}

// Elementwise work over a row goes in pieces of this many values. Work of
// a microsecond or two a row stays whole (one task a row: a decode step's
// one row runs inline, cheaper than waking a many-core pool), more is
// spread over the pool.
constexpr int64_t kRowPiece = 256;
template <class Fn>
void for_row_pieces(int64_t rows, int64_t width, int64_t grain, Fn fn) {
  parallel_for_pieces(rows, width, kRowPiece, grain, fn);
}

// x[d] = sum_s pre[s] * h[s][d] for d in [d0, d1), the copies in order.
void weighted_stream_sum(const float* pre, const ModelConfig& c, const float* h, float* x, int64_t d0, int64_t d1) {
  if (c.hc_mult == 4) {  // the released models': one pass, the same sums
    const float* h1 = h + c.dim;
    const float* h2 = h1 + c.dim;
    const float* h3 = h2 + c.dim;
    for (int64_t d = d0; d < d1; ++d) x[d] = (((0.0f + pre[0] * h[d]) + pre[1] * h1[d]) + pre[2] * h2[d]) + pre[3] * h3[d];
    return;
  }
  for (int64_t d = d0; d < d1; ++d) x[d] = 0.0f;
  for (int s = 0; s < c.hc_mult; ++s) {
    const float* hs = h + static_cast<int64_t>(s) * c.dim;
    for (int64_t d = d0; d < d1; ++d) x[d] += pre[s] * hs[d];
  }
}

// out[d] = post * x[d] + sum_i comb[i][j] * old_i[d] for d < n, the sum
// first (as the reference); old_i = old + i * stride. Copy j of a row's new
// streams, a piece of it.
void new_stream_piece(const float* comb, float post, int hc, int j, const float* x, const float* old, int64_t stride,
                      int64_t n, float* out) {
  for (int64_t d = 0; d < n; ++d) out[d] = 0.0f;
  for (int i = 0; i < hc; ++i) {
    const float cij = comb[i * hc + j];
    const float* ri = old + i * stride;
    for (int64_t d = 0; d < n; ++d) out[d] += cij * ri[d];
  }
  for (int64_t d = 0; d < n; ++d) out[d] = post * x[d] + out[d];
}

}  // namespace

void sinkhorn(float* comb, int hc, int iters, float eps, bool divide) {
  auto normalize_rows = [&] {
    for (int i = 0; i < hc; ++i) {
      float sum = 0.0f;
      for (int j = 0; j < hc; ++j) sum += comb[i * hc + j];
      for (int j = 0; j < hc; ++j) comb[i * hc + j] /= (sum + eps);
    }
  };
  auto normalize_cols = [&] {
    for (int j = 0; j < hc; ++j) {
      float sum = 0.0f;
      for (int i = 0; i < hc; ++i) sum += comb[i * hc + j];
      for (int i = 0; i < hc; ++i) comb[i * hc + j] /= (sum + eps);
    }
  };
  for (int i = 0; i < hc; ++i) {
    float* row = comb + i * hc;
    float mx = row[0];
    for (int j = 1; j < hc; ++j) mx = std::fmax(mx, row[j]);
    float sum = 0.0f;
    for (int j = 0; j < hc; ++j) sum += (row[j] = kernels::vexp(row[j] - mx));
    // PyTorch's softmax multiplies by the reciprocal of the sum; V4.1's
    // kernel divides.
    const float inv = 1.0f / sum;
    for (int j = 0; j < hc; ++j) row[j] = (divide ? row[j] / sum : row[j] * inv) + eps;
  }
  normalize_cols();
  for (int it = 1; it < iters; ++it) {
    normalize_rows();
    normalize_cols();
  }
}

namespace {

// The mixes of every row.
// after(r, pre of row r) runs in row r's task once its mixes are made.
template <class Source, class After>
HcMix mix_rows(const kernels::Kernels& k, const HyperConnWeights& w, const ModelConfig& c, const float* h, int64_t rows,
               const ReferenceRows& rr, bool divide, Source source, After after) {
  const int hc = c.hc_mult;
  const int64_t mix = c.mix_hc();
  HcMix out;
  out.pre.resize(rows * hc);
  out.post.resize(rows * hc);
  out.comb.resize(rows * hc * hc);
  stream_mixes(k, w.fn, mix, c, h, rows, source, [&](int64_t r, const float* m) {
    for (int s = 0; s < hc; ++s) {
      // pre and post are separate [rows, hc] tensors in the reference.
      const int64_t at = rr.element(r, hc, s), n = rr.elements(r, hc);
      out.pre[r * hc + s] = kernels::sigmoid_at(m[s] * w.scale[0] + w.base[s], at, n) + c.hc_eps;
      out.post[r * hc + s] = 2.0f * kernels::sigmoid_at(m[hc + s] * w.scale[1] + w.base[hc + s], at, n);
    }
    float* comb = &out.comb[r * hc * hc];
    for (int e = 0; e < hc * hc; ++e) comb[e] = m[2 * hc + e] * w.scale[2] + w.base[2 * hc + e];
    sinkhorn(comb, hc, c.hc_sinkhorn_iters, c.hc_eps, divide);
    after(r, &out.pre[r * hc]);
  });
  return out;
}

// Row r of a sublayer's input: its streams h_row collapsed with pre, then
// RMS-normed with the sublayer's norm, in the task that made its mixes (a
// job and a pass over the rows on the rank's thread fewer than collapsing
// and norming each in a step of its own; the same operations a row).
void collapse_and_norm_row(const float* pre, const ModelConfig& c, const float* h_row, const std::vector<float>& norm,
                           float* x_row) {
  weighted_stream_sum(pre, c, h_row, x_row, 0, c.dim);
  kernels::rms_norm(x_row, norm.data(), c.dim, c.norm_eps, x_row);
}

}  // namespace

HcMix hc_mixes(const kernels::Kernels& k, const HyperConnWeights& w, const ModelConfig& c, const float* h,
               int64_t rows, const ReferenceRows& rr, bool divide) {
  return mix_rows(k, w, c, h, rows, rr, divide, stored_pieces(h, static_cast<int64_t>(c.hc_mult) * c.dim),
                  [](int64_t, const float*) {});
}

void hc_collapse(const float* pre, const ModelConfig& c, const float* h, int64_t rows, float* x) {
  const int64_t flat = static_cast<int64_t>(c.hc_mult) * c.dim;
  const int64_t per_row = (c.dim + kRowPiece - 1) / kRowPiece;
  for_row_pieces(rows, c.dim, per_row, [&](int64_t r, int64_t d0, int64_t d1) {
    weighted_stream_sum(pre + r * c.hc_mult, c, h + r * flat, x + r * c.dim, d0, d1);
  });
}

HcMix hc_pre(const kernels::Kernels& k, const HyperConnWeights& w, const std::vector<float>& norm, const ModelConfig& c,
             const float* h, int64_t rows, const ReferenceRows& rr, float* x) {
  const int64_t flat = static_cast<int64_t>(c.hc_mult) * c.dim;
  return mix_rows(k, w, c, h, rows, rr, /*divide=*/false, stored_pieces(h, flat), [&](int64_t r, const float* pre) {
    collapse_and_norm_row(pre, c, h + r * flat, norm, x + r * c.dim);
  });
}

void hc_post(const HcMix& mix, const ModelConfig& c, const float* x, int64_t rows, const float* h, float* h_out) {
  const int hc = c.hc_mult;
  const int64_t dim = c.dim;
  // Element d of each new copy reads element d of every old one: a piece of
  // the row is updated on its own, in place from a copy of its old values.
  for_row_pieces(rows, dim, 2, [&](int64_t r, int64_t d0, int64_t d1) {
    const int64_t n = d1 - d0;
    const float* old = h + r * hc * dim + d0;
    int64_t stride = dim;
    thread_local std::vector<float> copy;
    if (h == h_out) {
      copy.resize(static_cast<size_t>(hc) * kRowPiece);
      for (int i = 0; i < hc; ++i) std::copy_n(old + i * dim, n, copy.data() + i * kRowPiece);
      old = copy.data();
      stride = kRowPiece;
    }
    for (int j = 0; j < hc; ++j)
      new_stream_piece(&mix.comb[r * hc * hc], mix.post[r * hc + j], hc, j, x + r * dim + d0, old, stride, n,
                       h_out + (r * hc + j) * dim + d0);
  });
}

HcMix hc_post_pre(const kernels::Kernels& k, const HcMix& mix, const float* y, const HyperConnWeights& next,
                  const std::vector<float>& next_norm, const ModelConfig& c, const float* h, int64_t rows,
                  const ReferenceRows& rr, float* h_out, float* x) {
  const int hc = c.hc_mult;
  const int64_t dim = c.dim, flat = hc * dim;
  if (!mixes_in_pieces(k, next.fn, c) || dim % kMixPiece != 0 || rows > kStepInProductRows || h_out == h) {
    hc_post(mix, c, y, rows, h, h_out);
    return hc_pre(k, next, next_norm, c, h_out, rows, rr, x);
  }
  // Piece q is a piece of one copy j: its new values, from the old copies'
  // same elements, made by each tile that sums it (one per panel of the
  // mixes; the first stores them), so the update and the mixes are one job.
  auto updated = [&](int64_t r0, int64_t n, int64_t q, int64_t panel, ScratchVector<float>& buffer) {
    const int64_t j = q * kMixPiece / dim, d0 = q * kMixPiece % dim;
    buffer.resize(n * kMixPiece);
    for (int64_t r = r0; r < r0 + n; ++r) {
      float* out = buffer.data() + (r - r0) * kMixPiece;
      new_stream_piece(&mix.comb[r * hc * hc], mix.post[r * hc + j], hc, static_cast<int>(j), y + r * dim + d0,
                       h + r * flat + d0, dim, kMixPiece, out);
      if (panel == 0) std::copy_n(out, kMixPiece, h_out + r * flat + j * dim + d0);
    }
    return static_cast<const float*>(buffer.data());
  };
  return mix_rows(k, next, c, h_out, rows, rr, /*divide=*/false, updated, [&](int64_t r, const float* pre) {
    collapse_and_norm_row(pre, c, h_out + r * flat, next_norm, x + r * dim);
  });
}

void hc_head(const kernels::Kernels& k, const HcHeadWeights& w, const ModelConfig& c, const float* h, int64_t rows,
             const int64_t* batch_row, const ReferenceRows& rr, float* x) {
  const int hc = c.hc_mult;
  std::vector<float> pre(rows * hc);
  stream_mixes(k, w.fn, hc, c, h, rows, stored_pieces(h, static_cast<int64_t>(hc) * c.dim), [&](int64_t r, const float* m) {
    for (int s = 0; s < hc; ++s) {
      const float a = m[s] * w.scale[0] + w.base[s];
      pre[r * hc + s] =
          kernels::sigmoid_at(a, rr.element(batch_row[r], hc, s), rr.elements(batch_row[r], hc)) + c.hc_eps;
    }
  });
  hc_collapse(pre.data(), c, h, rows, x);
}

}  // namespace dsv4
