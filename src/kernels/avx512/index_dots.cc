// The indexer's head dots in fast numerics, on the VNNI byte dot products.
// The indexer's queries and keys are both FP4: e2m1 codes times a power of
// two per 32 dimensions (the keys as the cache stores them, the queries
// through fp4_round_trip before they are scored). Twice an e2m1 value is an
// integer in [-12, 12], so a block's 32 products add up exactly in int32,
// and a (query, key) dot is each block's exact sum times the two scales
// (powers of two: exact too), the blocks added in order in f32. That is
// nearer the real dot than a chain of FMAs, four products to a lane per
// instruction instead of one, and independent of which keys or rows share
// a call (batch-invariant).
// VPDPBUSD multiplies unsigned by signed bytes: the keys go unsigned,
// offset by 12, and each query block's sum times 12 comes off again.
// A query that is not FP4 this way (another caller's) takes the f32 body.
#include <immintrin.h>

#include <cstring>

#include "kernels/avx512/avx512_kernels.h"
#include "kernels/cache_rows.h"
#include "kernels/isa_local.h"
#include "kernels/kernels.h"

namespace dsv4::kernels::avx512 {
namespace {

constexpr int64_t kBlock = kIndexScaleBlock;  // dimensions per scale
constexpr int64_t kGroups = kBlock / 4;       // 4-byte groups per block
constexpr int kKeyOffset = 12;

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// The queries of one panel of up to 16 heads as signed bytes, twice their
// e2m1 codes: bytes[g][lane] holds dimensions 4g..4g+3 of head `lane` (a
// dword each, as VPDPBUSD takes them); per block b, corr[b][lane] is 12
// times the lane's byte sum and scale[b][lane] a quarter of its scale.
struct QueryPanel {
  int32_t* bytes;  // [dim / 4][16]
  int32_t* corr;   // [dim / kBlock][16]
  float* scale;    // [dim / kBlock][16]
};

// Encodes head h of q into lane `lane`; false if a block of it is not an
// e2m1 code times a power of two within the normal floats.
bool encode_head(const float* q, int64_t dim, int lane, QueryPanel* panel) {
  // e2m1 magnitudes doubled: 0, 1, 2, 3, 4, 6, 8, 12.
  const __m512i allowed = _mm512_set1_epi32(0b1000101011111);
  for (int64_t b = 0; b < dim / kBlock; ++b) {
    const __m512 lo = _mm512_loadu_ps(q + b * kBlock), hi = _mm512_loadu_ps(q + b * kBlock + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    int8_t codes[kBlock];
    float scale = 0.0f;
    int32_t sum = 0;
    if (amax == 0.0f) {
      std::memset(codes, 0, sizeof codes);
    } else {
      // The largest code is 4 or 6 at a scale of amax's power of two / 4
      // (a block whose largest code is smaller doubles its codes until it
      // is one of them, and every smaller code doubled stays a code).
      const uint32_t exponent = bits_of(amax) >> 23;  // biased; amax is positive
      if (exponent < 20 || exponent > 230) return false;
      scale = from_bits((exponent - 2) << 23);
      const __m512 twice_inverse = _mm512_set1_ps(from_bits((127 + 127 + 3 - exponent) << 23));
      for (int half = 0; half < 2; ++half) {
        const __m512 t = _mm512_mul_ps(half ? hi : lo, twice_inverse);
        const __m512i v = _mm512_cvtps_epi32(t);
        const __m512i magnitude = _mm512_abs_epi32(v);
        const __mmask16 exact = _mm512_cmpeq_ps_mask(_mm512_cvtepi32_ps(v), t);
        const __mmask16 in_set =
            _mm512_test_epi32_mask(_mm512_srlv_epi32(allowed, magnitude), _mm512_set1_epi32(1)) &
            _mm512_cmple_epi32_mask(magnitude, _mm512_set1_epi32(12));
        if (static_cast<__mmask16>(exact & in_set) != 0xFFFF) return false;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 16 * half), _mm512_cvtepi32_epi8(v));
        sum += _mm512_reduce_add_epi32(v);
      }
    }
    panel->corr[b * kPanel + lane] = kKeyOffset * sum;
    panel->scale[b * kPanel + lane] = scale * 0.25f;
    for (int64_t g = 0; g < kGroups; ++g)
      std::memcpy(&panel->bytes[(b * kGroups + g) * kPanel + lane], codes + 4 * g, 4);
  }
  return true;
}

// An index key row's codes as unsigned bytes (twice the value plus 12), in
// dimension order, and its block scales.
void decode_key(const uint8_t* row, int64_t dim, uint8_t* bytes, float* scales) {
  const uint8_t* block_scales = row + dim / 2;
  // An e2m1 code (sign in bit 3) to twice its value plus kKeyOffset.
  const __m128i to_byte = _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
  for (int64_t b = 0; b < dim / kBlock; ++b) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * kBlock / 2));
    const __m128i low = _mm_shuffle_epi8(to_byte, _mm_and_si128(codes, _mm_set1_epi8(0x0F)));
    const __m128i high = _mm_shuffle_epi8(to_byte, _mm_and_si128(_mm_srli_epi16(codes, 4), _mm_set1_epi8(0x0F)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes + b * kBlock), _mm_unpacklo_epi8(low, high));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes + b * kBlock + 16), _mm_unpackhi_epi8(low, high));
    // e8m0 to float by its bits: the cache never stores 0 (2^-127) or 255.
    scales[b] = from_bits(static_cast<uint32_t>(block_scales[b]) << 23);
  }
}

// One key's dots with P panels over NB blocks from b0, each block's exact
// sum added to total[p] in block order. The key's words are broadcast once
// for every panel, and P x NB independent sums stay in flight.
template <int P, int NB>
void add_blocks(const QueryPanel* panels, const uint8_t* key, const float* key_scales, int64_t b0, __m512* total) {
  __m512i acc[P][NB];
  for (int p = 0; p < P; ++p)
    for (int i = 0; i < NB; ++i) acc[p][i] = _mm512_setzero_si512();
  for (int64_t g = 0; g < kGroups; ++g)
    for (int i = 0; i < NB; ++i) {
      const int64_t at = (b0 + i) * kGroups + g;
      int32_t word;
      std::memcpy(&word, key + 4 * at, 4);
      const __m512i w = _mm512_set1_epi32(word);
      for (int p = 0; p < P; ++p)
        acc[p][i] = _mm512_dpbusd_epi32(acc[p][i], w, _mm512_load_si512(panels[p].bytes + at * kPanel));
    }
  for (int i = 0; i < NB; ++i) {
    const int64_t b = b0 + i;
    const __m512 key_scale = _mm512_set1_ps(key_scales[b]);
    for (int p = 0; p < P; ++p) {
      const __m512i exact = _mm512_sub_epi32(acc[p][i], _mm512_load_si512(panels[p].corr + b * kPanel));
      const __m512 factor = _mm512_mul_ps(_mm512_load_ps(panels[p].scale + b * kPanel), key_scale);
      const __m512 block = _mm512_mul_ps(_mm512_cvtepi32_ps(exact), factor);
      total[p] = b == 0 ? block : _mm512_add_ps(total[p], block);
    }
  }
}

// One key against P panels: every block, four at a time.
template <int P>
void dots_of_key(const QueryPanel* panels, const uint8_t* key, const float* key_scales, int64_t blocks,
                 __m512* total) {
  int64_t b = 0;
  for (; blocks - b >= 4; b += 4) add_blocks<P, 4>(panels, key, key_scales, b, total);
  for (; blocks - b >= 2; b += 2) add_blocks<P, 2>(panels, key, key_scales, b, total);
  for (; b < blocks; ++b) add_blocks<P, 1>(panels, key, key_scales, b, total);
}

// Carves 64-byte aligned pieces out of the caller's scratch.
template <class T>
T* carve(char** at, int64_t count) {
  auto p = reinterpret_cast<uintptr_t>(*at);
  p = (p + 63) & ~uintptr_t{63};
  *at = reinterpret_cast<char*>(p + sizeof(T) * count);
  return reinterpret_cast<T*>(p);
}

}  // namespace

void head_dots_fast(const float* q, int64_t heads, const uint8_t* const* keys, int64_t num_keys, int64_t dim,
                    float* scratch, float* dots) {
  if (dim % kBlock) return head_dots_fused(q, heads, keys, num_keys, dim, scratch, dots);
  // head_dots_scratch gives (heads rounded up to 16 + kKeyTile) * dim
  // floats; this takes a quarter of that and a few alignments.
  const int64_t panels = (heads + kPanel - 1) / kPanel, blocks = dim / kBlock;
  char* at = reinterpret_cast<char*>(scratch);
  auto* bytes = carve<int32_t>(&at, panels * dim / 4 * kPanel);
  auto* corr = carve<int32_t>(&at, panels * blocks * kPanel);
  auto* scale = carve<float>(&at, panels * blocks * kPanel);
  auto* key = carve<uint8_t>(&at, dim);
  auto* key_scales = carve<float>(&at, blocks);
  auto* qp = carve<QueryPanel>(&at, panels);
  for (int64_t p = 0; p < panels; ++p) {
    qp[p] = {bytes + p * dim / 4 * kPanel, corr + p * blocks * kPanel, scale + p * blocks * kPanel};
    const int64_t n = lesser(kPanel, heads - p * kPanel);
    // Lanes past the heads: zero queries, their dots never stored.
    std::memset(qp[p].bytes, 0, sizeof(int32_t) * dim / 4 * kPanel);
    std::memset(qp[p].corr, 0, sizeof(int32_t) * blocks * kPanel);
    std::memset(qp[p].scale, 0, sizeof(float) * blocks * kPanel);
    for (int64_t h = 0; h < n; ++h)
      if (!encode_head(q + (p * kPanel + h) * dim, dim, static_cast<int>(h), &qp[p]))
        return head_dots_fused(q, heads, keys, num_keys, dim, scratch, dots);
  }
  for (int64_t j = 0; j < num_keys; ++j) {
    decode_key(keys[j], dim, key, key_scales);
    for (int64_t p0 = 0; p0 < panels; p0 += 4) {
      __m512 total[4];
      switch (lesser(4, panels - p0)) {
        case 4: dots_of_key<4>(qp + p0, key, key_scales, blocks, total); break;
        case 3: dots_of_key<3>(qp + p0, key, key_scales, blocks, total); break;
        case 2: dots_of_key<2>(qp + p0, key, key_scales, blocks, total); break;
        default: dots_of_key<1>(qp + p0, key, key_scales, blocks, total); break;
      }
      for (int64_t p = p0; p < lesser(panels, p0 + 4); ++p) {
        const int64_t n = lesser(kPanel, heads - p * kPanel);
        _mm512_mask_storeu_ps(dots + j * heads + p * kPanel, static_cast<__mmask16>((1u << n) - 1), total[p - p0]);
      }
    }
  }
}

}  // namespace dsv4::kernels::avx512
