// Mixture of experts: a gate picks top-k routed experts per token (by hashed
// token id in the first layers, by biased sqrt-softplus scores later), each a
// clamped SwiGLU, plus one shared expert for every token.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dispatch.h"
#include "model/collectives.h"
#include "model/config.h"
#include "model/reference_rows.h"
#include "model/token_split.h"
#include "model/weights.h"

namespace dsv4 {

struct Routing {
  std::vector<int32_t> experts;  // [rows, topk]
  std::vector<float> weights;    // [rows, topk]
};

Routing route_tokens(const kernels::Kernels& k, const MoEWeights& w, const ModelConfig& c, const float* x,
                     const int32_t* token_ids, int64_t rows, const ReferenceRows& rr);

struct MoeGroups {
  Collectives* tp = nullptr;  // holds a share of the shared expert's features
  Collectives* ep = nullptr;  // holds the routed experts between them
};

// x: [rows, dim] (after ffn_norm), every row of the forward on every rank of
// the tensor-parallel group.
// routed_out [split.count(), dim]: the routed experts' sum for this rank's
// block of rows, each slot computed on the rank holding its expert and added
// in expert-index order, the same bits as one rank holding all.
// shared_out [rows, w.shared.w2.out]: the shared expert's output features
// this rank holds, for every row.
void moe_forward(const kernels::Kernels& k, const MoEWeights& w, const ModelConfig& c, const float* x,
                 const int32_t* token_ids, int64_t rows, const ReferenceRows& rr, const TokenSplit& split,
                 const MoeGroups& groups, float* shared_out, float* routed_out);

}  // namespace dsv4
