// Manifold-constrained hyper-connections (mHC): the residual stream is hc
// copies of the hidden state. Before a sublayer they are mixed down to one
// input (pre weights); after it the output is spread back (post weights) and
// the copies are remixed by a Sinkhorn-normalized (doubly stochastic) matrix.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dispatch.h"
#include "model/config.h"
#include "model/reference_rows.h"
#include "model/weights.h"

namespace dsv4 {

// Alternating row/column normalization of an hc x hc matrix of logits, as
// the reference: row softmax + eps, column normalize, then iters-1 rounds.
// divide: the softmax divides by its sum (V4.1) instead of multiplying by
// the reciprocal (V4).
void sinkhorn(float* comb, int hc, int iters, float eps, bool divide = false);

struct HcMix {
  std::vector<float> pre;   // [rows, hc]: the collapse weights
  std::vector<float> post;  // [rows, hc]
  std::vector<float> comb;  // [rows, hc, hc]; out[j] = sum_i comb[i][j] * residual[i]
};

// A sublayer's mixes from the streams h [rows, hc, dim]: the projection of
// each row's flattened streams by w.fn over their RMS, split into pre
// (sigmoid + eps), post (2 sigmoid) and the Sinkhorn-normalized comb.
// divide: as sinkhorn's (V4.1).
HcMix hc_mixes(const kernels::Kernels& k, const HyperConnWeights& w, const ModelConfig& c, const float* h,
               int64_t rows, const ReferenceRows& rr, bool divide = false);

// x [rows, dim] = sum_s pre[r][s] * h[r][s], the copies in order.
void hc_collapse(const float* pre, const ModelConfig& c, const float* h, int64_t rows, float* x);

// h: [rows, hc, dim] -> x: [rows, dim] collapsed with the mixes' own pre
// (V4), then RMS-normed with the sublayer's norm (attn_norm, ffn_norm), and
// the mixes. A row's collapse and norm run in the task that made its mixes.
HcMix hc_pre(const kernels::Kernels& k, const HyperConnWeights& w, const std::vector<float>& norm, const ModelConfig& c,
             const float* h, int64_t rows, const ReferenceRows& rr, float* x);

// The streams after a sublayer: h_out[j] = post[j] * x + sum_i comb[i][j] * h[i]
// (h_out may be h).
void hc_post(const HcMix& mix, const ModelConfig& c, const float* x, int64_t rows, const float* h, float* h_out);

// hc_post into h_out, then hc_pre of the next sublayer on h_out (h_out may
// be h, which takes the two steps apart):
// the same values, and for a decode step's few rows in fast numerics one
// pool job for both where a piece of the mixes lies in one copy (dim a
// multiple of 512): each tile makes the new values of the piece it sums.
HcMix hc_post_pre(const kernels::Kernels& k, const HcMix& mix, const float* y, const HyperConnWeights& next,
                  const std::vector<float>& next_norm, const ModelConfig& c, const float* h, int64_t rows,
                  const ReferenceRows& rr, float* h_out, float* x);

// The head's reduction of the streams to one vector per row: sigmoid weights.
// Row r is row batch_row[r] of the forward (the reference runs the head over
// every row, and where a row sits decides its sigmoid's rounding).
void hc_head(const kernels::Kernels& k, const HcHeadWeights& w, const ModelConfig& c, const float* h, int64_t rows,
             const int64_t* batch_row, const ReferenceRows& rr, float* x);

}  // namespace dsv4
