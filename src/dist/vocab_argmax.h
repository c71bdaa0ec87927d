// Greedy decoding with the head sharded by vocabulary: each rank offers its
// best (logit, token id) and only those pairs are exchanged, never the
// full logits. Ties go to the lowest token id, as argmax over the whole row.
#pragma once

#include <cstdint>

#include "dist/communicator.h"

namespace dsv4 {

// logits: this rank's [vocab_begin, vocab_begin + n) slice for `rows` rows
// (row stride n). out[rows]: the global argmax of each row, on every rank.
void sharded_argmax(Communicator& tp, const float* logits, int64_t rows, int64_t n, int64_t vocab_begin, int32_t* out);

}  // namespace dsv4
