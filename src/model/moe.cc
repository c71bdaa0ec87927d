#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "ops/topk.h"

namespace dsv4 {
namespace {

// x: [n, dim] -> out: [n, dim]; row weights (may be null) scale the hidden
// activations before w2, as the reference does.
void expert_forward(const ExpertWeights& e, float limit, const float* x, int64_t n, const float* row_weights,
                    float* out) {
  const int64_t inter = e.w1.out;
  std::vector<float> gate(n * inter), up(n * inter);
  linear_forward(e.w1, x, n, gate.data());
  linear_forward(e.w3, x, n, up.data());
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t k = 0; k < inter; ++k) {
      float g = gate[r * inter + k], u = up[r * inter + k];
      if (limit > 0) {
        u = std::clamp(u, -limit, limit);
        g = std::min(g, limit);
      }
      float h = kernels::silu_at(g, r * inter + k, n * inter) * u;
      gate[r * inter + k] = row_weights ? row_weights[r] * h : h;
    }
  }
  linear_forward(e.w2, gate.data(), n, out);
}

}  // namespace

Routing route_tokens(const MoEWeights& w, const ModelConfig& c, const float* x, const int32_t* token_ids, int64_t rows,
                     const ReferenceRows& rr) {
  const int E = c.n_routed_experts, k = c.n_activated_experts;
  Routing rt;
  rt.experts.resize(rows * k);
  rt.weights.resize(rows * k);
  std::vector<float> logits(rows * E);
  matmul(x, rows, c.dim, w.gate.data(), E, logits.data());
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
    int32_t* idx = &rt.experts[r * k];
    if (w.hash) {
      std::copy_n(&w.tid2eid[static_cast<int64_t>(token_ids[r]) * k], k, idx);
    } else {
      // The bias steers selection only; weights come from the plain scores.
      std::vector<float> biased(E);
      for (int e = 0; e < E; ++e) biased[e] = s[e] + w.gate_bias[e];
      topk_like_torch(biased.data(), E, k, idx);
    }
    float* wt = &rt.weights[r * k];
    for (int j = 0; j < k; ++j) wt[j] = s[idx[j]];
    const float sum = kernels::sum(wt, k);
    for (int j = 0; j < k; ++j) {
      if (c.score_func != ScoreFunc::kSoftmax) wt[j] /= sum;
      wt[j] *= c.route_scale;
    }
  }
  return rt;
}

void moe_forward(const MoEWeights& w, const ModelConfig& c, const float* x, const int32_t* token_ids, int64_t rows,
                 const ReferenceRows& rr, Collectives* expert_group, float* out) {
  const int64_t dim = c.dim, k = c.n_activated_experts;
  Routing rt = route_tokens(w, c, x, token_ids, rows, rr);
  // Each (row, choice) slot gets its expert's output; experts this rank
  // does not hold leave their slots zero for the group to fill.
  std::vector<float> slots(rows * k * dim, 0.0f);
  std::vector<int64_t> slot_of;
  std::vector<float> xin, wts, yout;
  for (int e = 0; e < c.n_routed_experts; ++e) {
    if (w.experts[e].w1.out == 0) continue;  // held by another rank
    slot_of.clear();
    wts.clear();
    for (int64_t s = 0; s < rows * k; ++s)
      if (rt.experts[s] == e) {
        slot_of.push_back(s);
        wts.push_back(rt.weights[s]);
      }
    if (slot_of.empty()) continue;
    const int64_t n = static_cast<int64_t>(slot_of.size());
    xin.resize(n * dim);
    yout.resize(n * dim);
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + slot_of[i] / k * dim, dim, &xin[i * dim]);
    expert_forward(w.experts[e], c.swiglu_limit, xin.data(), n, wts.data(), yout.data());
    for (int64_t i = 0; i < n; ++i) std::copy_n(&yout[i * dim], dim, &slots[slot_of[i] * dim]);
  }
  // Every slot has one owner, so the group's sum is exactly that owner's
  // output (adding zeros changes nothing).
  if (expert_group && expert_group->size() > 1) expert_group->all_reduce_sum(slots.data(), rows * k * dim);
  // Per row, the experts' outputs in expert-index order (the reference's
  // loop over experts), then the shared expert.
  std::vector<float> y(rows * dim, 0.0f);
  std::vector<int64_t> order(k);
  for (int64_t r = 0; r < rows; ++r) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return rt.experts[r * k + a] < rt.experts[r * k + b]; });
    for (int64_t j : order)
      for (int64_t d = 0; d < dim; ++d) y[r * dim + d] += slots[(r * k + j) * dim + d];
  }
  expert_forward(w.shared, c.swiglu_limit, x, rows, nullptr, out);
  for (int64_t i = 0; i < rows * dim; ++i) out[i] += y[i];
}

}  // namespace dsv4
