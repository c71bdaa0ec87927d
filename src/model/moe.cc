#include "model/moe.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/phase_timer.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "model/expert_dispatch.h"
#include "ops/topk.h"

namespace dsv4 {
namespace {

// x: [n, dim] -> out: [n, w2.out]; row weights (may be null) scale the
// hidden activations before w2, as the reference does. When w1/w3 hold
// hidden features [hidden_begin, +w1.out) of hidden_width (tensor
// parallelism), `group` gathers the whole hidden rows before w2.
void expert_forward(const kernels::Kernels& k, const ExpertWeights& e, float limit, const float* x, int64_t n, const float* row_weights,
                    float* out, Collectives* group = nullptr) {
  const int64_t inter = e.w1.out, ranks = group ? group->size() : 1, width = inter * ranks;
  const int64_t first = group ? group->rank() * inter : 0;
  std::vector<float> gate(n * inter), up(n * inter);
  linear_forward(k, e.w1, x, n, gate.data());
  linear_forward(k, e.w3, x, n, up.data());
  parallel_for(n, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* g = gate.data() + r * inter;
      float* u = up.data() + r * inter;
      if (limit > 0)
        for (int64_t j = 0; j < inter; ++j) {
          u[j] = std::clamp(u[j], -limit, limit);
          g[j] = std::min(g[j], limit);
        }
      // Where the element sits in the whole [n, width] tensor decides its rounding.
      k.silu(g, inter, r * width + first, n * width);
      for (int64_t j = 0; j < inter; ++j) g[j] = row_weights ? row_weights[r] * (g[j] * u[j]) : g[j] * u[j];
    }
  });
  if (!group) {
    linear_forward(k, e.w2, gate.data(), n, out);
    return;
  }
  std::vector<float> hidden(n * width);
  gather_columns(group, TokenSplit::of(n, group), gate.data(), inter, hidden.data());
  linear_forward(k, e.w2, hidden.data(), n, out);
}

}  // namespace

Routing route_tokens(const kernels::Kernels& k, const MoEWeights& w, const ModelConfig& c, const float* x,
                     const int32_t* token_ids, int64_t rows, const ReferenceRows& rr) {
  const int E = c.n_routed_experts, topk = c.n_activated_experts;
  Routing rt;
  rt.experts.resize(rows * topk);
  rt.weights.resize(rows * topk);
  std::vector<float> logits(rows * E);
  linear_forward(k, w.gate, x, rows, logits.data());
  for (int64_t r = 0; r < rows; ++r) {
    float* s = &logits[r * E];
    if (c.score_func == ScoreFunc::kSoftmax) {
      float mx = *std::max_element(s, s + E), sum = 0.0f;
      for (int e = 0; e < E; ++e) sum += (s[e] = std::exp(s[e] - mx));
      for (int e = 0; e < E; ++e) s[e] /= sum;
    } else if (c.score_func == ScoreFunc::kSigmoid) {
      for (int e = 0; e < E; ++e) s[e] = kernels::sigmoid_at(s[e], rr.element(r, E, e), rr.elements(r, E));
    } else {
      for (int e = 0; e < E; ++e) s[e] = std::sqrt(kernels::softplus_at(s[e], rr.element(r, E, e), rr.elements(r, E)));
    }
    int32_t* idx = &rt.experts[r * topk];
    if (w.hash) {
      std::copy_n(&w.tid2eid[static_cast<int64_t>(token_ids[r]) * topk], topk, idx);
    } else {
      // The bias steers selection only; weights come from the plain scores.
      std::vector<float> biased(E);
      for (int e = 0; e < E; ++e) biased[e] = s[e] + w.gate_bias[e];
      topk_like_torch(biased.data(), E, topk, idx);
    }
    float* wt = &rt.weights[r * topk];
    for (int j = 0; j < topk; ++j) wt[j] = s[idx[j]];
    const float sum = kernels::sum(wt, topk);
    for (int j = 0; j < topk; ++j) {
      if (c.score_func != ScoreFunc::kSoftmax) wt[j] /= sum;
      wt[j] *= c.route_scale;
    }
  }
  return rt;
}

void moe_forward(const kernels::Kernels& k, const MoEWeights& w, const ModelConfig& c, const float* x,
                 const int32_t* token_ids, int64_t rows, const ReferenceRows& rr, const TokenSplit& split,
                 const MoeGroups& groups, float* shared_out, float* routed_out) {
  const int64_t dim = c.dim, topk = c.n_activated_experts;
  // Routed experts for this rank's block of rows.
  const int64_t first = split.begin(), n = split.count();
  PhaseTimer::Scope routed_time(Phase::kRoutedExperts);
  Routing rt = route_tokens(k, w, c, x + first * dim, token_ids + first, n, rr.slice(first, n));
  const ExpertSlots slots{rt.experts.data(), rt.weights.data(), n, static_cast<int>(topk), c.n_routed_experts};
  std::vector<float> slot_out(n * topk * dim);
  run_expert_slots(
      slots, x + first * dim, dim, groups.ep,
      [&](int e, const float* xin, int64_t m, const float* row_weights, float* y) {
        expert_forward(k, w.experts[e], c.swiglu_limit, xin, m, row_weights, y);
      },
      slot_out.data());
  sum_slots_in_expert_order(slots, slot_out.data(), dim, routed_out);
  // The shared expert for every row, this rank's share of its features.
  PhaseTimer::Scope shared_time(Phase::kSharedExpert);
  Collectives* tp = groups.tp && groups.tp->size() > 1 ? groups.tp : nullptr;
  expert_forward(k, w.shared, c.swiglu_limit, x, rows, nullptr, shared_out, tp);
}

}  // namespace dsv4
