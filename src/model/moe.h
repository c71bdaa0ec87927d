// Mixture of experts: a gate picks top-k routed experts per token (by hashed
// token id in the first layers, by biased sqrt-softplus scores later), each a
// clamped SwiGLU, plus one shared expert for every token.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/reference_rows.h"
#include "model/weights.h"

namespace dsv4 {

struct Routing {
  std::vector<int32_t> experts;  // [rows, topk]
  std::vector<float> weights;    // [rows, topk]
};

Routing route_tokens(const MoEWeights& w, const ModelConfig& c, const float* x, const int32_t* token_ids, int64_t rows,
                     const ReferenceRows& rr);

// x: [rows, dim] (after ffn_norm) -> out: [rows, dim].
void moe_forward(const MoEWeights& w, const ModelConfig& c, const float* x, const int32_t* token_ids, int64_t rows,
                 const ReferenceRows& rr, float* out);

}  // namespace dsv4
