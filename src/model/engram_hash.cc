#include "model/engram_hash.h"

#include <algorithm>
#include <limits>
#include <set>

#include "base/check.h"

namespace dsv4 {
namespace {

using u128 = unsigned __int128;

uint64_t mul_mod(uint64_t a, uint64_t b, uint64_t m) { return static_cast<uint64_t>(static_cast<u128>(a) * b % m); }

uint64_t pow_mod(uint64_t b, uint64_t e, uint64_t m) {
  uint64_t r = 1;
  for (b %= m; e; e >>= 1, b = mul_mod(b, b, m))
    if (e & 1) r = mul_mod(r, b, m);
  return r;
}

// Deterministic Miller-Rabin: these bases decide every 64-bit n.
bool is_prime(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t p : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37}) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int s = 0;
  for (; d % 2 == 0; d /= 2) ++s;
  for (uint64_t a : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37}) {
    uint64_t x = pow_mod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int r = 1; r < s && composite; ++r) {
      x = mul_mod(x, x, n);
      if (x == n - 1) composite = false;
    }
    if (composite) return false;
  }
  return true;
}

// numpy's SeedSequence(seed).generate_state(4, uint64): the entropy hashed
// into a pool of 4 words, then mixed out (bit_generator.pyx).
std::vector<uint64_t> seed_sequence_words(uint64_t seed, int n64) {
  constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
  constexpr uint32_t kMixL = 0xca01f9dd, kMixR = 0x4973f715;
  std::vector<uint32_t> entropy;
  do {
    entropy.push_back(static_cast<uint32_t>(seed));
    seed >>= 32;
  } while (seed);
  uint32_t hash_const = kInitA;
  auto hashmix = [&](uint32_t v) {
    v ^= hash_const;
    hash_const *= kMultA;
    v *= hash_const;
    return v ^ (v >> 16);
  };
  auto mix = [](uint32_t x, uint32_t y) {
    uint32_t r = kMixL * x - kMixR * y;
    return r ^ (r >> 16);
  };
  constexpr int kPool = 4;
  uint32_t pool[kPool];
  for (int i = 0; i < kPool; ++i) pool[i] = hashmix(i < static_cast<int>(entropy.size()) ? entropy[i] : 0);
  for (int i = 0; i < kPool; ++i)
    for (int j = 0; j < kPool; ++j)
      if (i != j) pool[j] = mix(pool[j], hashmix(pool[i]));
  for (size_t i = kPool; i < entropy.size(); ++i)
    for (int j = 0; j < kPool; ++j) pool[j] = mix(pool[j], hashmix(entropy[i]));
  uint32_t h = kInitB;
  std::vector<uint32_t> words;
  for (int i = 0; i < 2 * n64; ++i) {
    uint32_t d = pool[i % kPool] ^ h;
    h *= kMultB;
    d *= h;
    words.push_back(d ^ (d >> 16));
  }
  std::vector<uint64_t> out;
  for (int i = 0; i < n64; ++i) out.push_back(words[2 * i] | static_cast<uint64_t>(words[2 * i + 1]) << 32);
  return out;
}

// PCG64 (XSL-RR 128/64), seeded as numpy seeds it.
class Pcg64 {
 public:
  explicit Pcg64(uint64_t seed) {
    const std::vector<uint64_t> s = seed_sequence_words(seed, 4);
    inc_ = ((static_cast<u128>(s[2]) << 64 | s[3]) << 1) | 1;
    state_ = 0;
    step();
    state_ += static_cast<u128>(s[0]) << 64 | s[1];
    step();
  }
  uint64_t next() {
    step();
    const unsigned rot = static_cast<unsigned>(state_ >> 122);
    const uint64_t x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
    return (x >> rot) | (x << ((64 - rot) & 63));
  }

 private:
  void step() {
    const u128 mult = static_cast<u128>(0x2360ED051FC65DA4ULL) << 64 | 0x4385DF649FCCF645ULL;
    state_ = state_ * mult + inc_;
  }
  u128 state_ = 0, inc_ = 0;
};

}  // namespace

std::vector<int64_t> numpy_default_rng_integers(uint64_t seed, int64_t high, int n) {
  DSV4_CHECK(high > (int64_t{1} << 32));
  Pcg64 g(seed);
  const uint64_t excl = static_cast<uint64_t>(high);
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) {
    u128 m = static_cast<u128>(g.next()) * excl;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < excl) {
      const uint64_t threshold = (std::numeric_limits<uint64_t>::max() - (excl - 1)) % excl;
      while (low < threshold) {
        m = static_cast<u128>(g.next()) * excl;
        low = static_cast<uint64_t>(m);
      }
    }
    out.push_back(static_cast<int64_t>(m >> 64));
  }
  return out;
}

EngramHashLayout engram_hash_layout(const EngramConfig& e, int32_t compressed_vocab_size, int64_t compressed_pad) {
  EngramHashLayout l;
  l.ngram = e.max_ngram_size;
  l.heads = e.n_heads;
  l.pad = compressed_pad;
  std::set<int64_t> seen;
  for (size_t layer = 0; layer < e.layer_ids.size(); ++layer) {
    std::vector<int64_t> primes;
    for (int n = 2; n <= l.ngram; ++n) {
      int64_t current = e.vocab_size - 1;
      for (int h = 0; h < l.heads; ++h) {
        do ++current;
        while (!is_prime(static_cast<uint64_t>(current)) || seen.count(current));
        seen.insert(current);
        primes.push_back(current);
      }
    }
    std::vector<int64_t> offsets(primes.size(), 0);
    for (size_t c = 1; c < primes.size(); ++c) offsets[c] = offsets[c - 1] + primes[c - 1];
    l.primes.push_back(primes);
    l.offsets.push_back(offsets);
    // Bounded so that a compressed id times a multiplier cannot overflow.
    const int64_t bound = std::max<int64_t>(1, std::numeric_limits<int64_t>::max() / compressed_vocab_size / 2);
    std::vector<int64_t> m = numpy_default_rng_integers(10007ULL * e.layer_ids[layer], bound, l.ngram);
    for (int64_t& v : m) v = 2 * v + 1;
    l.multipliers.push_back(m);
  }
  return l;
}

void engram_rows(const EngramHashLayout& l, const int64_t* history, int64_t p, int64_t* out) {
  // The ids ending at p, newest first; look-back stops at the sequence start
  // and at a dead position, both read as the pad id.
  std::vector<int64_t> tokens(l.ngram);
  bool blocked = false;
  for (int s = 0; s < l.ngram; ++s) {
    const int64_t src = history[std::max<int64_t>(p - s, 0)];
    blocked = blocked || p < s || src == kEngramDead;
    tokens[s] = blocked ? l.pad : src;
  }
  const int columns = l.columns();
  for (size_t layer = 0; layer < l.primes.size(); ++layer) {
    // XOR the products in one look-back at a time: after step i the value
    // hashes the (i + 1)-gram.
    int64_t rolling = tokens[0] * l.multipliers[layer][0];
    for (int i = 1; i < l.ngram; ++i) {
      rolling ^= tokens[i] * l.multipliers[layer][i];
      for (int h = 0; h < l.heads; ++h) {
        const int c = (i - 1) * l.heads + h;
        out[layer * columns + c] = rolling % l.primes[layer][c] + l.offsets[layer][c];
      }
    }
  }
}

}  // namespace dsv4
