// KV compression: gated softmax pooling of `ratio` consecutive tokens into one
// row (overlapping a window's predecessor when ratio is 4), then RMSNorm,
// RoPE at the window's first position, and the reference's QAT rounding.
#pragma once

#include <cstdint>
#include <vector>

#include "model/rope.h"
#include "model/sequence_state.h"
#include "model/weights.h"

namespace dsv4 {

void init_compressor_state(const CompressorWeights& w, CompressorState* st);

// Feeds positions [start_pos, start_pos + n) of one sequence, whose wkv and
// wgate projections are kv[n, width] and score[n, width], and appends each
// window that completes to `rows` ([*, head_dim]). qat_round: see ModelOptions.
void compress_tokens(const CompressorWeights& w, const Rope& rope, int rope_dim, float norm_eps, bool qat_round,
                     const float* kv, const float* score, int64_t start_pos, int64_t n, CompressorState* st,
                     std::vector<float>* rows);

}  // namespace dsv4
