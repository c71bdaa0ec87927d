// DeepSeek-V4.1 Engram's table rows: at each position, the n-grams (2 up to
// max_ngram_size tokens) of compressed token ids ending there are hashed,
// each into its own prime-sized bucket range per hash head, as the
// reference's engram.py computes them (EngramLayout, NgramHashState).
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace dsv4 {

struct EngramHashLayout {
  int ngram = 0;                                  // max_ngram_size
  int heads = 0;
  std::vector<std::vector<int64_t>> primes;       // [engram layer][column], column = (n - 2) * heads + head
  std::vector<std::vector<int64_t>> offsets;      // exclusive prefix sums of primes: each column's first row
  std::vector<std::vector<int64_t>> multipliers;  // [engram layer][look-back], odd
  int64_t pad = 0;                                // the compressed id of engram_pad_id
  int columns() const { return (ngram - 1) * heads; }
};

// Primes are handed out in order, never twice: for every layer and n-gram
// size, each head takes the smallest unused prime above vocab_size - 1.
// Multipliers come from numpy's default_rng(10007 * layer) (PCG64 seeded
// by SeedSequence, bounded integers by Lemire's method), as 2v + 1.
EngramHashLayout engram_hash_layout(const EngramConfig& engram, int32_t compressed_vocab_size, int64_t compressed_pad);

// A token that takes no part in an n-gram (an image position): look-back
// stops before it.
inline constexpr int64_t kEngramDead = -1;

// Rows of every engram layer for position p of a sequence whose compressed
// ids (or kEngramDead) are history[0..p]: out[layer * columns + column].
void engram_rows(const EngramHashLayout& layout, const int64_t* history, int64_t p, int64_t* out);

// numpy.random.default_rng(seed).integers(0, high, n, dtype=int64), high > 2^32.
std::vector<int64_t> numpy_default_rng_integers(uint64_t seed, int64_t high, int n);

}  // namespace dsv4
