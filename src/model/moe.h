// Mixture of experts: a gate picks top-k routed experts per token (by hashed
// token id in the first layers, by biased sqrt-softplus scores later), each a
// clamped SwiGLU, plus one shared expert for every token.
#pragma once

#include <cstdint>
#include <vector>

#include "model/collectives.h"
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
// With an expert group, each rank runs the experts it holds and the group
// combines their outputs; the result is the same bits as one rank holding all.
void moe_forward(const MoEWeights& w, const ModelConfig& c, const float* x, const int32_t* token_ids, int64_t rows,
                 const ReferenceRows& rr, Collectives* expert_group, float* out);

}  // namespace dsv4
