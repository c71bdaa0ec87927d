#include "model/hyper_connection.h"

#include <cmath>

#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "ops/linear.h"

namespace dsv4 {
namespace {

// mixes[r, m] = (fn[m] . h[r]) / rms(h[r]) over the flattened hc*dim stream.
std::vector<float> stream_mixes(const kernels::Kernels& k, const Linear& fn, int64_t num_mixes, const ModelConfig& c,
                                const float* h, int64_t rows) {
  const int64_t flat = static_cast<int64_t>(c.hc_mult) * c.dim;
  std::vector<float> mixes(rows * num_mixes);
  linear_forward(k, fn, h, rows, mixes.data());
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = h + r * flat;
    float rs = 1.0f / std::sqrt(kernels::sum_squares(x, flat) / static_cast<float>(flat) + c.norm_eps);
    for (int64_t m = 0; m < num_mixes; ++m) mixes[r * num_mixes + m] *= rs;
  }
  return mixes;
}

void weighted_stream_sum(const float* pre, const ModelConfig& c, const float* h, float* x) {
  for (int d = 0; d < c.dim; ++d) x[d] = 0.0f;
  for (int s = 0; s < c.hc_mult; ++s) {
    const float* hs = h + static_cast<int64_t>(s) * c.dim;
    for (int d = 0; d < c.dim; ++d) x[d] += pre[s] * hs[d];
  }
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

// The mixes of every row; with x, each row also collapsed with its own pre
// in the same pass.
HcMix mix_rows(const kernels::Kernels& k, const HyperConnWeights& w, const ModelConfig& c, const float* h, int64_t rows,
               const ReferenceRows& rr, bool divide, float* x) {
  const int hc = c.hc_mult;
  const int64_t mix = c.mix_hc(), flat = static_cast<int64_t>(hc) * c.dim;
  std::vector<float> mixes = stream_mixes(k, w.fn, mix, c, h, rows);
  HcMix out;
  out.pre.resize(rows * hc);
  out.post.resize(rows * hc);
  out.comb.resize(rows * hc * hc);
  parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* m = &mixes[r * mix];
      for (int s = 0; s < hc; ++s) {
        // pre and post are separate [rows, hc] tensors in the reference.
        const int64_t at = rr.element(r, hc, s), n = rr.elements(r, hc);
        out.pre[r * hc + s] = kernels::sigmoid_at(m[s] * w.scale[0] + w.base[s], at, n) + c.hc_eps;
        out.post[r * hc + s] = 2.0f * kernels::sigmoid_at(m[hc + s] * w.scale[1] + w.base[hc + s], at, n);
      }
      float* comb = &out.comb[r * hc * hc];
      for (int e = 0; e < hc * hc; ++e) comb[e] = m[2 * hc + e] * w.scale[2] + w.base[2 * hc + e];
      sinkhorn(comb, hc, c.hc_sinkhorn_iters, c.hc_eps, divide);
      if (x) weighted_stream_sum(&out.pre[r * hc], c, h + r * flat, x + r * c.dim);
    }
  });
  return out;
}

}  // namespace

HcMix hc_mixes(const kernels::Kernels& k, const HyperConnWeights& w, const ModelConfig& c, const float* h,
               int64_t rows, const ReferenceRows& rr, bool divide) {
  return mix_rows(k, w, c, h, rows, rr, divide, nullptr);
}

void hc_collapse(const float* pre, const ModelConfig& c, const float* h, int64_t rows, float* x) {
  const int64_t flat = static_cast<int64_t>(c.hc_mult) * c.dim;
  parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) weighted_stream_sum(pre + r * c.hc_mult, c, h + r * flat, x + r * c.dim);
  });
}

HcMix hc_pre(const kernels::Kernels& k, const HyperConnWeights& w, const ModelConfig& c, const float* h, int64_t rows,
             const ReferenceRows& rr, float* x) {
  return mix_rows(k, w, c, h, rows, rr, /*divide=*/false, x);
}

void hc_post(const HcMix& mix, const ModelConfig& c, const float* x, int64_t rows, float* h) {
  const int hc = c.hc_mult;
  const int64_t dim = c.dim;
  parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
    std::vector<float> res(hc * dim);
    for (int64_t r = r0; r < r1; ++r) {
      float* hr = h + r * hc * dim;
      std::copy_n(hr, hc * dim, res.data());
      const float* comb = &mix.comb[r * hc * hc];
      for (int j = 0; j < hc; ++j) {
        float* out = hr + j * dim;
        const float p = mix.post[r * hc + j];
        // post * x + sum_i comb[i][j] * residual_i, the sum first (as the reference).
        for (int64_t d = 0; d < dim; ++d) out[d] = 0.0f;
        for (int i = 0; i < hc; ++i) {
          const float cij = comb[i * hc + j];
          const float* ri = &res[i * dim];
          for (int64_t d = 0; d < dim; ++d) out[d] += cij * ri[d];
        }
        for (int64_t d = 0; d < dim; ++d) out[d] = p * x[r * dim + d] + out[d];
      }
    }
  });
}

void hc_head(const kernels::Kernels& k, const HcHeadWeights& w, const ModelConfig& c, const float* h, int64_t rows,
             const int64_t* batch_row, const ReferenceRows& rr, float* x) {
  const int hc = c.hc_mult;
  const int64_t flat = static_cast<int64_t>(hc) * c.dim;
  std::vector<float> mixes = stream_mixes(k, w.fn, hc, c, h, rows);
  std::vector<float> pre(hc);
  for (int64_t r = 0; r < rows; ++r) {
    for (int s = 0; s < hc; ++s) {
      const float a = mixes[r * hc + s] * w.scale[0] + w.base[s];
      pre[s] = kernels::sigmoid_at(a, rr.element(batch_row[r], hc, s), rr.elements(batch_row[r], hc)) + c.hc_eps;
    }
    weighted_stream_sum(pre.data(), c, h + r * flat, x + r * c.dim);
  }
}

}  // namespace dsv4
