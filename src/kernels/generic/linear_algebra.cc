#include <algorithm>
#include <cmath>

#include "kernels/generic/generic_kernels.h"
#include "kernels/kernels.h"

namespace dsv4::kernels {

float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

void matmul_nt(const float* x, int64_t m, int64_t k, const float* w, int64_t n_begin, int64_t n_end,
               float* y, int64_t ldy) {
  // Four weight rows at a time so each x row is read once per four outputs;
  // each output still adds its products left to right.
  int64_t j = n_begin;
  for (; j + 4 <= n_end; j += 4) {
    const float* w0 = w + j * k;
    const float* w1 = w0 + k;
    const float* w2 = w1 + k;
    const float* w3 = w2 + k;
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * k;
      float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      for (int64_t t = 0; t < k; ++t) {
        a0 += xi[t] * w0[t];
        a1 += xi[t] * w1[t];
        a2 += xi[t] * w2[t];
        a3 += xi[t] * w3[t];
      }
      float* yi = y + i * ldy + j;
      yi[0] = a0;
      yi[1] = a1;
      yi[2] = a2;
      yi[3] = a3;
    }
  }
  for (; j < n_end; ++j) {
    for (int64_t i = 0; i < m; ++i) y[i * ldy + j] = dot(x + i * k, w + j * k, k);
  }
}

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  float r = 1.0f / std::sqrt(sum_squares(x, n) / static_cast<float>(n) + eps);
  if (weight) {
    for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * r);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * r;
  }
}

void generic::hadamard(float* x, int64_t n, float* scratch) {
  // x @ H_n as a plain product (each output adds +-x[l] left to right), the
  // reference's order; the butterfly would round differently.
  // Sylvester's H_n[l][i] = (-1)^popcount(l & i).
  for (int64_t i = 0; i < n; ++i) {
    float acc = 0.0f;
    for (int64_t l = 0; l < n; ++l) acc += (__builtin_popcountll(l & i) & 1) ? -x[l] : x[l];
    scratch[i] = acc;
  }
  const float s = static_cast<float>(std::pow(static_cast<double>(n), -0.5));
  for (int64_t i = 0; i < n; ++i) x[i] = scratch[i] * s;
}

void rope(float* x, const float* cos, const float* sin, int64_t pairs, bool inverse) {
  for (int64_t i = 0; i < pairs; ++i) {
    float c = cos[i], s = inverse ? -sin[i] : sin[i];
    float re = x[2 * i], im = x[2 * i + 1];
    x[2 * i] = re * c - im * s;
    x[2 * i + 1] = re * s + im * c;
  }
}

int64_t head_dots_scratch(int64_t heads, int64_t dim) {
  // AVX-512: the queries transposed in panels of 16 heads, and a tile of
  // decoded keys; generic: one decoded key.
  return ((heads + kPanel - 1) / kPanel * kPanel + kKeyTile) * dim;
}

void generic::head_dots(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_keys, int64_t dim,
                       float* scratch, float* dots) {
  float* k = scratch;
  for (int64_t j = 0; j < num_keys; ++j) {
    load_index_row(keys[j], dim, k);
    for (int64_t h = 0; h < heads; ++h) dots[j * heads + h] = dot(q + h * dim, k, dim);
  }
}

float sink_softmax(const uint8_t* const* keys, int64_t num_slots, float sink, float* scores) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < num_slots; ++j) mx = std::fmax(mx, scores[j]);
  for (int64_t j = 0; j < num_slots; ++j) scores[j] = keys[j] ? vexp(scores[j] - mx) : 0.0f;
  // The sink is one more logit whose value row is zero: denominator only.
  return sum(scores, num_slots) + vexp(sink - mx);
}

int64_t sink_attention_scratch(int64_t heads, int64_t num_slots, int64_t dim) {
  // Scores [heads][slots], then (AVX-512) the queries transposed in panels
  // of 16 heads [panels][dim][16] and a tile of kKeyTile decoded keys for
  // the scores, at least 16 + kKeyTile rows a tile of decoded values for
  // the weighted sum; or (generic) one decoded key.
  const int64_t panels = std::max<int64_t>(1, (heads + kPanel - 1) / kPanel);
  return heads * num_slots + (panels * kPanel + kKeyTile) * dim;
}

void generic::sink_scores(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots,
                          const KvRowFormat& f, float scale, float* scratch, float* scores, int64_t stride) {
  const int64_t dim = f.dim();
  float* k = scratch;
  for (int64_t j = 0; j < num_slots; ++j) {
    if (keys[j]) load_kv_row(keys[j], f, k);
    for (int64_t h = 0; h < heads; ++h) scores[h * stride + j] = keys[j] ? dot(q + h * dim, k, dim) * scale : -INFINITY;
  }
}

namespace {

// Each slot's weight p = e / denominator, as the reference divides.
void weights_of(const uint8_t* const* keys, int64_t num_slots, float sink, float* scores) {
  const float denom = sink_softmax(keys, num_slots, sink, scores);
  for (int64_t j = 0; j < num_slots; ++j) scores[j] = scores[j] / denom;
}

// Dimensions [d0, d1) of the rows weighted by p, the slots added in order.
void weighted_rows(const float* p, int64_t heads, int64_t p_stride, const uint8_t* const* keys, int64_t num_slots,
                   const KvRowFormat& f, int64_t d0, int64_t d1, float* scratch, float* out, int64_t out_stride) {
  float* k = scratch;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t d = d0; d < d1; ++d) out[h * out_stride + d - d0] = 0.0f;
  for (int64_t j = 0; j < num_slots; ++j) {
    if (!keys[j]) continue;
    load_kv_row(keys[j], f, k);
    for (int64_t h = 0; h < heads; ++h) {
      const float w = p[h * p_stride + j];
      for (int64_t d = d0; d < d1; ++d) out[h * out_stride + d - d0] += w * k[d];
    }
  }
}

}  // namespace

void generic::sink_weighted_sum(const float* scores, int64_t heads, int64_t stride, const uint8_t* const* keys,
                                int64_t num_slots, const KvRowFormat& f, const float* sinks, int64_t d0, int64_t d1,
                                float* scratch, float* out, int64_t out_stride) {
  float* p = scratch;  // [heads][num_slots]
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < num_slots; ++j) p[h * num_slots + j] = scores[h * stride + j];
    weights_of(keys, num_slots, sinks[h], p + h * num_slots);
  }
  weighted_rows(p, heads, num_slots, keys, num_slots, f, d0, d1, scratch + heads * num_slots, out, out_stride);
}

void generic::sink_attention_heads(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots,
                                  const KvRowFormat& f, const float* sinks, float scale, float* scratch, float* out) {
  float* scores = scratch;  // [heads][num_slots]
  float* rest = scratch + heads * num_slots;
  sink_scores(q, heads, keys, num_slots, f, scale, rest, scores, num_slots);
  for (int64_t h = 0; h < heads; ++h) weights_of(keys, num_slots, sinks[h], scores + h * num_slots);
  weighted_rows(scores, heads, num_slots, keys, num_slots, f, 0, f.dim(), rest, out, f.dim());
}

void generic::v41_block(const float* a, int64_t lda, int64_t m, const float* tile, int64_t n, const float* sx,
                        const float* wscale, float* acc) {
  for (int64_t r = 0; r < m; ++r) {
    const float* ar = a + r * lda;
    float* accr = acc + r * kPanel;
    if (!wscale) {  // one left-to-right sum over the whole row
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < kPanel; ++j) accr[j] += ar[i] * tile[i * kPanel + j];
      continue;
    }
    float part[kPanel] = {};
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < kPanel; ++j) part[j] += ar[i] * tile[i * kPanel + j];
    for (int64_t j = 0; j < kPanel; ++j) accr[j] += part[j] * sx[r] * wscale[j];
  }
}

}  // namespace dsv4::kernels
