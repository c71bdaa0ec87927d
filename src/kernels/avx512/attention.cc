// Sink attention for up to 16 query heads sharing their key slots, and the
// indexer's dot products of query heads with shared keys, on AVX-512, over
// cache rows kept as FP8/FP4 codes. Key rows are decoded kKeyTile at a time
// into a small tile (a code times its power-of-two scale: exact), so each
// row's bytes are read once per pass whatever the number of heads.
// Scores: the heads sit in the 16 lanes (q transposed to [dim][16]) and each
// key element is broadcast, so every (head, slot) dot product still adds its
// products left to right; the tile's slots keep independent sums in flight.
// Weighted sum: the dimensions sit in the lanes and the slots are added in
// order. The softmax's exponentials are the generic vexp on 16 lanes
// (bit-identical) and its denominator the generic sum.
// Fast numerics (the *_fast bodies): the same loops with each multiply-add
// fused, and the softmax denominator summed 16 lanes wide. Every output's
// order still depends only on its own head and key slots.
#include <immintrin.h>

#include <algorithm>

#include "base/dtype.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/vexp.h"
#include "kernels/generic/generic_kernels.h"
#include "kernels/isa_local.h"

namespace dsv4::kernels::avx512 {
namespace {

// 16 e4m3 codes to floats times `scale`. Sign-extending each byte and
// shifting it by 20 puts the sign at bit 31 and the exponent and mantissa
// bits at 20..26, a float 2^-120 times the code's value (e4m3 subnormals
// become float subnormals).
inline __m512 decode_e4m3(const uint8_t* codes, __m512 scale) {
  const __m512i wide = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  const __m512i bits = _mm512_and_si512(_mm512_slli_epi32(wide, 20), _mm512_set1_epi32(static_cast<int>(0x87F00000u)));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0x1p120f)), scale);
}

// 16 e2m1 codes (8 bytes, low nibble first) to floats times `scale`.
inline __m512 decode_e2m1(const uint8_t* codes, __m512 scale) {
  const __m512 values = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                                       -2.0f, -3.0f, -4.0f, -6.0f);
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes));
  const __m128i low = _mm_and_si128(bytes, _mm_set1_epi8(0x0F));
  const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0F));
  const __m512i index = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(low, high));
  return _mm512_mul_ps(_mm512_permutexvar_ps(index, values), scale);
}

inline __mmask16 tail_mask(int64_t left) {
  return left >= kPanel ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

void decode_kv_row(const uint8_t* row, const KvRowFormat& f, float* out) {
  for (int64_t b = 0; b < f.nope; b += kKvScaleBlock) {
    const __m512 scale = _mm512_set1_ps(e8m0_to_f32(row[f.scale_offset() + b / kKvScaleBlock]));
    for (int64_t v = b; v < b + kKvScaleBlock; v += kPanel) _mm512_storeu_ps(out + v, decode_e4m3(row + v, scale));
  }
  const float* rope = reinterpret_cast<const float*>(row + f.rope_offset());
  for (int64_t v = 0; v < f.rope; v += kPanel) {
    const __mmask16 m = f.rope - v >= kPanel ? 0xFFFF : static_cast<__mmask16>((1u << (f.rope - v)) - 1);
    _mm512_mask_storeu_ps(out + f.nope + v, m, _mm512_maskz_loadu_ps(m, rope + v));
  }
}

// Dimensions [d0, d1) of a KV row (multiples of 16; a 16-vector never
// straddles the FP8 and rope parts, the FP8 part being whole scale blocks).
void decode_kv_dims(const uint8_t* row, const KvRowFormat& f, int64_t d0, int64_t d1, float* out) {
  const float* rope = reinterpret_cast<const float*>(row + f.rope_offset());
  for (int64_t v = d0; v < d1; v += kPanel) {
    if (v < f.nope) {
      const __m512 scale = _mm512_set1_ps(e8m0_to_f32(row[f.scale_offset() + v / kKvScaleBlock]));
      _mm512_storeu_ps(out + v - d0, decode_e4m3(row + v, scale));
    } else {
      const __mmask16 m = tail_mask(d1 - v);
      _mm512_mask_storeu_ps(out + v - d0, m, _mm512_maskz_loadu_ps(m, rope + v - f.nope));
    }
  }
}

void decode_index_row(const uint8_t* row, int64_t dim, float* out) {
  const uint8_t* scales = row + dim / 2;
  for (int64_t v = 0; v < dim; v += kPanel)
    _mm512_storeu_ps(out + v, decode_e2m1(row + v / 2, _mm512_set1_ps(e8m0_to_f32(scales[v / kIndexScaleBlock]))));
}

// Decodes key rows [j0, j0 + n) into tile rows; rows[s] points at slot
// j0 + s's decoded row, or is null for a masked slot, whose tile row is
// zeroed (the dot products run over every tile row without a branch).
template <class Decode>
void decode_tile(const uint8_t* const* keys, int64_t j0, int64_t n, int64_t dim, float* tile, const float** rows,
                 Decode decode) {
  for (int64_t s = 0; s < n; ++s) {
    rows[s] = keys[j0 + s] ? tile + s * dim : nullptr;
    if (rows[s]) decode(keys[j0 + s], tile + s * dim);
    else fill_floats(tile + s * dim, dim, 0.0f);
  }
}

// dots[(j0 + s) * key_stride + h * head_stride] = (q[h] . k[s]) * scale for
// the S decoded keys (tile rows from `first`, dim apart) and the heads in
// `lanes` (q transposed: qt[d][16]). Masked keys (null k[s]) are not stored.
inline __m512 mul_add(bool fused, __m512 a, __m512 b, __m512 c) {
  return fused ? _mm512_fmadd_ps(a, b, c) : _mm512_add_ps(c, _mm512_mul_ps(a, b));
}

// P panels of heads at once (qt's panels kPanel * dim apart, dots' heads
// kPanel * head_stride apart): each key element broadcast serves them all.
// Every dot product adds its products in d order whatever P.
template <int S, int P, bool Fused>
void dot_slots(const float* qt, const __mmask16* lanes, const float* first, const float* const* k, int64_t j0,
               int64_t dim, float scale, float* dots, int64_t key_stride, int64_t head_stride) {
  __m512 acc[P][S];
  for (int p = 0; p < P; ++p)
    for (int s = 0; s < S; ++s) acc[p][s] = _mm512_setzero_ps();
  for (int64_t d = 0; d < dim; ++d) {
    __m512 qd[P];
    for (int p = 0; p < P; ++p) qd[p] = _mm512_loadu_ps(qt + (p * dim + d) * kPanel);
    for (int s = 0; s < S; ++s) {
      const __m512 kd = _mm512_set1_ps(first[s * dim + d]);
      for (int p = 0; p < P; ++p) acc[p][s] = mul_add(Fused, qd[p], kd, acc[p][s]);
    }
  }
  alignas(64) float lane[kPanel];
  for (int p = 0; p < P; ++p)
    for (int s = 0; s < S; ++s) {
      if (!k[s]) continue;
      _mm512_store_ps(lane, scale == 1.0f ? acc[p][s] : _mm512_mul_ps(acc[p][s], _mm512_set1_ps(scale)));
      float* to = dots + (j0 + s) * key_stride + p * kPanel * head_stride;
      for (int h = 0; h < kPanel; ++h)
        if (lanes[p] >> h & 1) to[h * head_stride] = lane[h];
    }
}

// A tile's n decoded keys against P panels of up to 16 heads.
template <int P, bool Fused>
void dot_tile(const float* qt, const __mmask16* lanes, const float* tile, const float* const* rows, int64_t j0,
              int64_t n, int64_t dim, float scale, float* dots, int64_t key_stride, int64_t head_stride) {
  if (n == kKeyTile) {
    dot_slots<kKeyTile, P, Fused>(qt, lanes, tile, rows, j0, dim, scale, dots, key_stride, head_stride);
    return;
  }
  for (int64_t s = 0; s < n; ++s)
    dot_slots<1, P, Fused>(qt, lanes, tile + s * dim, rows + s, j0 + s, dim, scale, dots, key_stride, head_stride);
}

__mmask16 lanes_of(int64_t heads) { return static_cast<__mmask16>((1u << heads) - 1); }

// A tile's keys against every panel of the heads (qt [panels][dim][16]),
// two panels at a time: 16 sums in flight, each broadcast key element
// serving 32 heads (one panel at a time, the broadcasts were as many as
// the multiply-adds and held the loads' ports). Head h's dots go to
// dots[key * key_stride + h * head_stride].
template <bool Fused>
void dot_tile_panels(const float* qt, int64_t heads, const float* tile, const float* const* rows, int64_t j0,
                     int64_t n, int64_t dim, float scale, float* dots, int64_t key_stride, int64_t head_stride) {
  const int64_t panels = (heads + kPanel - 1) / kPanel;
  for (int64_t p = 0; p < panels;) {
    const int64_t two = panels - p >= 2 ? 2 : 1;
    __mmask16 lanes[2];
    for (int64_t i = 0; i < two; ++i) lanes[i] = lanes_of(lesser(kPanel, heads - (p + i) * kPanel));
    const float* qp = qt + p * kPanel * dim;
    float* to = dots + p * kPanel * head_stride;
    if (two == 2) dot_tile<2, Fused>(qp, lanes, tile, rows, j0, n, dim, scale, to, key_stride, head_stride);
    else dot_tile<1, Fused>(qp, lanes, tile, rows, j0, n, dim, scale, to, key_stride, head_stride);
    p += two;
  }
}

// Up to 16 heads of q [heads][dim] transposed to qt [dim][16], zero-padded.
void transpose_heads(const float* q, int64_t heads, int64_t dim, float* qt) {
  for (int64_t d = 0; d < dim; ++d)
    for (int64_t h = 0; h < kPanel; ++h) qt[d * kPanel + h] = h < heads ? q[h * dim + d] : 0.0f;
}

// The weighted sum decodes this many rows a tile: the scratch's rows for
// the transposed queries and the score tile, free by then
// (sink_attention_scratch).
constexpr int64_t kValueTile = kPanel + kKeyTile;

// For H heads at once: o[h][d + 16 v] += sum_s p[h][s] * rows[s][d + 16 v]
// for v < V, over the tile's unmasked slots in slot order (the sums stay in
// registers, and each key vector loaded serves the H heads).
template <int H, int V, bool Fused>
inline void add_weighted(const float* const* rows, int64_t n, const float* const (&p)[H], int64_t d,
                         float* const (&o)[H]) {
  __m512 acc[H][V];
  for (int h = 0; h < H; ++h)
    for (int v = 0; v < V; ++v) acc[h][v] = _mm512_loadu_ps(o[h] + d + v * kPanel);
  for (int64_t s = 0; s < n; ++s) {
    if (!rows[s]) continue;
    __m512 ps[H];
    for (int h = 0; h < H; ++h) ps[h] = _mm512_set1_ps(p[h][s]);
    const float* k = rows[s] + d;
    for (int v = 0; v < V; ++v) {
      const __m512 kv = _mm512_loadu_ps(k + v * kPanel);
      for (int h = 0; h < H; ++h) acc[h][v] = mul_add(Fused, ps[h], kv, acc[h][v]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(o[h] + d + v * kPanel, acc[h][v]);
}

// The dimensions [0, width) of heads [h, h + H), a register block at a time.
template <int H, bool Fused>
inline void add_weighted_heads(const float* const* rows, int64_t n, const float* p, int64_t p_stride, int64_t h,
                               int64_t width, float* out, int64_t out_stride) {
  const float* ph[H];
  float* oh[H];
  for (int i = 0; i < H; ++i) ph[i] = p + (h + i) * p_stride, oh[i] = out + (h + i) * out_stride;
  constexpr int kWide = H == 1 ? 16 : 4;  // 16 or 4 H accumulators
  int64_t d = 0;
  for (; width - d >= kWide * kPanel; d += kWide * kPanel) add_weighted<H, kWide, Fused>(rows, n, ph, d, oh);
  for (; d < width; d += kPanel) add_weighted<H, 1, Fused>(rows, n, ph, d, oh);
}

// The generic sink_softmax then the division by its denominator, 16 slots
// at a time: scores [num_slots] (masked slots -inf) become the weights.
template <bool Fused>
void sink_softmax_weights(const uint8_t* const* keys, int64_t num_slots, float sink, float* scores) {
  __m512 mx = _mm512_set1_ps(-__builtin_inff());
  for (int64_t j = 0; j < num_slots; j += kPanel)
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, tail_mask(num_slots - j), scores + j));
  const float top = _mm512_reduce_max_ps(mx);
  const __m512 top16 = _mm512_set1_ps(top);
  __m512 lanes = _mm512_setzero_ps();
  for (int64_t j = 0; j < num_slots; j += kPanel) {
    const __mmask16 m = tail_mask(num_slots - j);
    __mmask16 live = 0;
    for (int64_t s = 0; s < kPanel && j + s < num_slots; ++s) live |= static_cast<__mmask16>(keys[j + s] ? 1u << s : 0);
    const __m512 e = _mm512_maskz_mov_ps(live, vexp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + j), top16)));
    _mm512_mask_storeu_ps(scores + j, m, e);
    lanes = _mm512_add_ps(lanes, e);
  }
  const float tail = _mm512_cvtss_f32(vexp16(_mm512_set1_ps(sink - top)));
  const float denom = (Fused ? _mm512_reduce_add_ps(lanes) : sum(scores, num_slots)) + tail;
  const __m512 d16 = _mm512_set1_ps(denom);
  for (int64_t j = 0; j < num_slots; j += kPanel) {
    const __mmask16 m = tail_mask(num_slots - j);
    _mm512_mask_storeu_ps(scores + j, m, _mm512_div_ps(_mm512_maskz_loadu_ps(m, scores + j), d16));
  }
}

// scores[h * stride + j] = (q[h] . key_j) * scale, -inf for a masked slot.
// Each tile of keys is decoded once for every panel of 16 heads (a prefill
// row's task takes all its heads: decoding a row's keys per panel was
// about a third of the attention's time at 32 heads).
template <bool Fused>
void scores_of(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots, const KvRowFormat& f,
               float scale, float* scratch, float* scores, int64_t stride) {
  const int64_t dim = f.dim(), panels = (heads + kPanel - 1) / kPanel;
  float* qt = scratch;                       // [panels][dim][16]
  float* tile = qt + panels * kPanel * dim;  // [kKeyTile][dim]
  auto decode = [&](const uint8_t* row, float* to) { decode_kv_row(row, f, to); };
  const float* rows[kKeyTile];
  for (int64_t p = 0; p < panels; ++p)
    transpose_heads(q + p * kPanel * dim, lesser(kPanel, heads - p * kPanel), dim, qt + p * kPanel * dim);
  for (int64_t j = 0; j < num_slots; j += kKeyTile) {
    const int64_t n = lesser(kKeyTile, num_slots - j);
    decode_tile(keys, j, n, dim, tile, rows, decode);
    dot_tile_panels<Fused>(qt, heads, tile, rows, j, n, dim, scale, scores, 1, stride);
  }
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < num_slots; ++j)
      if (!keys[j]) scores[h * stride + j] = -__builtin_inff();
}

// out[h * out_stride + d - d0] = sum_j p[h * p_stride + j] * key_j[d] for
// d in [d0, d1), the slots added in order.
template <bool Fused>
void weighted_sum(const float* p, int64_t heads, int64_t p_stride, const uint8_t* const* keys, int64_t num_slots,
                  const KvRowFormat& f, int64_t d0, int64_t d1, float* scratch, float* out, int64_t out_stride) {
  const int64_t width = d1 - d0;
  float* tile = scratch;  // [kValueTile][width]
  const float* rows[kValueTile];
  for (int64_t h = 0; h < heads; ++h) fill_floats(out + h * out_stride, width, 0.0f);
  for (int64_t j = 0; j < num_slots; j += kValueTile) {
    const int64_t n = lesser(kValueTile, num_slots - j);
    for (int64_t s = 0; s < n; ++s) {
      rows[s] = keys[j + s] ? tile + s * width : nullptr;
      if (rows[s]) decode_kv_dims(keys[j + s], f, d0, d1, tile + s * width);
    }
    // 4 heads x 64 dimensions a register block: each key vector loaded
    // serves 4 heads (one head at a time, the loads and the sums' round
    // trips through out kept half the FMA pipes idle).
    int64_t h = 0;
    for (; heads - h >= 4; h += 4) add_weighted_heads<4, Fused>(rows, n, p + j, p_stride, h, width, out, out_stride);
    for (; h < heads; ++h) add_weighted_heads<1, Fused>(rows, n, p + j, p_stride, h, width, out, out_stride);
  }
}

template <bool Fused>
void attend(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots, const KvRowFormat& f,
            const float* sinks, float scale, float* scratch, float* out) {
  float* scores = scratch;  // [heads][num_slots]
  float* rest = scratch + heads * num_slots;
  scores_of<Fused>(q, heads, keys, num_slots, f, scale, rest, scores, num_slots);
  for (int64_t h = 0; h < heads; ++h) sink_softmax_weights<Fused>(keys, num_slots, sinks[h], scores + h * num_slots);
  weighted_sum<Fused>(scores, heads, num_slots, keys, num_slots, f, 0, f.dim(), rest, out, f.dim());
}

template <bool Fused>
void dots_of_heads(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_keys, int64_t dim,
                   float* scratch, float* dots) {
  const int64_t panels = (heads + kPanel - 1) / kPanel;
  float* qt = scratch;                            // [panels][dim][16]
  float* tile = scratch + panels * kPanel * dim;  // [kKeyTile][dim]
  auto decode = [&](const uint8_t* row, float* to) { decode_index_row(row, dim, to); };
  const float* rows[kKeyTile];
  for (int64_t p = 0; p < panels; ++p)
    transpose_heads(q + p * kPanel * dim, lesser(kPanel, heads - p * kPanel), dim, qt + p * kPanel * dim);
  for (int64_t j = 0; j < num_keys; j += kKeyTile) {
    const int64_t n = lesser(kKeyTile, num_keys - j);
    decode_tile(keys, j, n, dim, tile, rows, decode);
    dot_tile_panels<Fused>(qt, heads, tile, rows, j, n, dim, 1.0f, dots, heads, 1);
  }
}

}  // namespace

void sink_attention_heads(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots,
                          const KvRowFormat& f, const float* sinks, float scale, float* scratch, float* out) {
  if (f.dim() % kPanel) return generic::sink_attention_heads(q, heads, keys, num_slots, f, sinks, scale, scratch, out);
  attend<false>(q, heads, keys, num_slots, f, sinks, scale, scratch, out);
}

void sink_attention_heads_fast(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots,
                               const KvRowFormat& f, const float* sinks, float scale, float* scratch, float* out) {
  if (f.dim() % kPanel) return generic::sink_attention_heads(q, heads, keys, num_slots, f, sinks, scale, scratch, out);
  attend<true>(q, heads, keys, num_slots, f, sinks, scale, scratch, out);
}

// The two steps of sink attention (dispatch.h), exact (Fused false) and
// fast; the generic bodies where the attention above falls back to them.
template <bool Fused>
void sink_scores_as(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots, const KvRowFormat& f,
                    float scale, float* scratch, float* scores, int64_t stride) {
  if (f.dim() % kPanel) return generic::sink_scores(q, heads, keys, num_slots, f, scale, scratch, scores, stride);
  // A panel of heads at a time: the scratch holds one (dispatch.h).
  for (int64_t h = 0; h < heads; h += kPanel)
    scores_of<Fused>(q + h * f.dim(), lesser(kPanel, heads - h), keys, num_slots, f, scale, scratch,
                     scores + h * stride, stride);
}

template <bool Fused>
void sink_weighted_sum_as(const float* scores, int64_t heads, int64_t stride, const uint8_t* const* keys,
                          int64_t num_slots, const KvRowFormat& f, const float* sinks, int64_t d0, int64_t d1,
                          float* scratch, float* out, int64_t out_stride) {
  if (f.dim() % kPanel)
    return generic::sink_weighted_sum(scores, heads, stride, keys, num_slots, f, sinks, d0, d1, scratch, out,
                                      out_stride);
  float* p = scratch;  // [heads][num_slots]
  for (int64_t h = 0; h < heads; ++h) {
    std::copy(scores + h * stride, scores + h * stride + num_slots, p + h * num_slots);
    sink_softmax_weights<Fused>(keys, num_slots, sinks[h], p + h * num_slots);
  }
  weighted_sum<Fused>(p, heads, num_slots, keys, num_slots, f, d0, d1, scratch + heads * num_slots, out, out_stride);
}

void sink_scores(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots, const KvRowFormat& f,
                 float scale, float* scratch, float* scores, int64_t stride) {
  sink_scores_as<false>(q, heads, keys, num_slots, f, scale, scratch, scores, stride);
}
void sink_scores_fast(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_slots,
                      const KvRowFormat& f, float scale, float* scratch, float* scores, int64_t stride) {
  sink_scores_as<true>(q, heads, keys, num_slots, f, scale, scratch, scores, stride);
}
void sink_weighted_sum(const float* scores, int64_t heads, int64_t stride, const uint8_t* const* keys,
                       int64_t num_slots, const KvRowFormat& f, const float* sinks, int64_t d0, int64_t d1,
                       float* scratch, float* out, int64_t out_stride) {
  sink_weighted_sum_as<false>(scores, heads, stride, keys, num_slots, f, sinks, d0, d1, scratch, out, out_stride);
}
void sink_weighted_sum_fast(const float* scores, int64_t heads, int64_t stride, const uint8_t* const* keys,
                            int64_t num_slots, const KvRowFormat& f, const float* sinks, int64_t d0, int64_t d1,
                            float* scratch, float* out, int64_t out_stride) {
  sink_weighted_sum_as<true>(scores, heads, stride, keys, num_slots, f, sinks, d0, d1, scratch, out, out_stride);
}

void head_dots(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_keys, int64_t dim,
               float* scratch, float* dots) {
  if (dim % kPanel) return generic::head_dots(q, heads, keys, num_keys, dim, scratch, dots);
  dots_of_heads<false>(q, heads, keys, num_keys, dim, scratch, dots);
}

void head_dots_fused(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_keys, int64_t dim,
                     float* scratch, float* dots) {
  if (dim % kPanel) return generic::head_dots(q, heads, keys, num_keys, dim, scratch, dots);
  dots_of_heads<true>(q, heads, keys, num_keys, dim, scratch, dots);
}

}  // namespace dsv4::kernels::avx512
