#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/check.h"
#include "base/phase_timer.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
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
  for (int64_t r = 0; r < n; ++r) {
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
  if (!group) {
    linear_forward(k, e.w2, gate.data(), n, out);
    return;
  }
  std::vector<float> hidden(n * width);
  gather_columns(group, TokenSplit::of(n, group), gate.data(), inter, hidden.data());
  linear_forward(k, e.w2, hidden.data(), n, out);
}

// One (row, choice) slot on its way to the rank holding its expert.
struct SlotHeader {
  int32_t expert;
  float weight;
};

// Routed experts over the expert group: every slot travels to the rank
// holding its expert (an all-to-all), runs there, and its output comes back
// (a second all-to-all). slots_out: [rows * k, dim] in slot order.
void run_routed_experts(const kernels::Kernels& kern, const MoEWeights& w, const ModelConfig& c, const float* x, const Routing& rt, int64_t rows,
                        Collectives* ep, float* slots_out) {
  const int64_t dim = c.dim, k = c.n_activated_experts, n_slots = rows * k;
  const int ranks = ep ? ep->size() : 1, per_rank = c.n_routed_experts / ranks;
  // Pack each destination's slots, in slot order: header then the row.
  const int64_t record = sizeof(SlotHeader) + sizeof(float) * dim;
  std::vector<std::vector<int64_t>> to(ranks);
  for (int64_t s = 0; s < n_slots; ++s) to[rt.experts[s] / per_rank].push_back(s);
  std::vector<size_t> send_bytes(ranks), recv_bytes(ranks), count_bytes(ranks, sizeof(int64_t));
  std::vector<int64_t> send_counts(ranks), recv_counts(ranks);
  std::vector<char> send(n_slots * record);
  char* at = send.data();
  for (int r = 0; r < ranks; ++r) {
    send_counts[r] = static_cast<int64_t>(to[r].size());
    send_bytes[r] = send_counts[r] * record;
    for (int64_t s : to[r]) {
      const SlotHeader hdr{rt.experts[s], rt.weights[s]};
      std::memcpy(at, &hdr, sizeof hdr);
      std::memcpy(at + sizeof hdr, x + s / k * dim, sizeof(float) * dim);
      at += record;
    }
  }
  std::vector<char> recv;
  if (ep && ranks > 1) {
    ep->all_to_all_v(send_counts.data(), count_bytes, recv_counts.data(), count_bytes);
    int64_t total = 0;
    for (int r = 0; r < ranks; ++r) total += recv_counts[r], recv_bytes[r] = recv_counts[r] * record;
    recv.resize(total * record);
    ep->all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes);
  } else {
    recv_counts = send_counts;
    recv = std::move(send);
  }
  // Run each expert this rank holds over the slots it received, in arrival order.
  const int64_t got = static_cast<int64_t>(recv.size()) / record;
  std::vector<float> results(got * dim);
  std::vector<std::vector<int64_t>> mine(c.n_routed_experts);
  std::vector<std::vector<float>> wts(c.n_routed_experts);
  for (int64_t i = 0; i < got; ++i) {
    SlotHeader hdr;
    std::memcpy(&hdr, &recv[i * record], sizeof hdr);
    mine[hdr.expert].push_back(i);
    wts[hdr.expert].push_back(hdr.weight);
  }
  std::vector<int> active;
  for (int e = 0; e < c.n_routed_experts; ++e) {
    if (mine[e].empty()) continue;
    DSV4_CHECK_MSG(w.experts[e].w1.out > 0, "a slot for expert %d reached a rank that does not hold it", e);
    active.push_back(e);
  }
  auto run_expert = [&](int e) {
    const int64_t n = static_cast<int64_t>(mine[e].size());
    std::vector<float> xin(n * dim), yout(n * dim);
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(&xin[i * dim], &recv[mine[e][i] * record + sizeof(SlotHeader)], sizeof(float) * dim);
    expert_forward(kern, w.experts[e], c.swiglu_limit, xin.data(), n, wts[e].data(), yout.data());
    for (int64_t i = 0; i < n; ++i) std::copy_n(&yout[i * dim], dim, &results[mine[e][i] * dim]);
  };
  // With enough active experts, whole experts per thread (one pool job for
  // the layer instead of three per expert: decode's experts are small);
  // otherwise each expert's GEMMs split over the pool. The same kernels run
  // either way, so the numbers are identical.
  if (static_cast<int64_t>(active.size()) >= 2 * ThreadPool::global().num_threads()) {
    parallel_for(static_cast<int64_t>(active.size()), 1, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) run_expert(active[i]);
    });
  } else {
    for (int e : active) run_expert(e);
  }
  // Outputs travel back the way their slots came.
  std::vector<float> back;
  if (ep && ranks > 1) {
    std::vector<size_t> out_bytes(ranks), in_bytes(ranks);
    for (int r = 0; r < ranks; ++r) {
      out_bytes[r] = sizeof(float) * recv_counts[r] * dim;
      in_bytes[r] = sizeof(float) * send_counts[r] * dim;
    }
    back.resize(n_slots * dim);
    ep->all_to_all_v(results.data(), out_bytes, back.data(), in_bytes);
  } else {
    back = std::move(results);
  }
  int64_t i = 0;
  for (int r = 0; r < ranks; ++r)
    for (int64_t s : to[r]) std::copy_n(&back[i++ * dim], dim, slots_out + s * dim);
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
  std::vector<float> slots(n * topk * dim);
  run_routed_experts(k, w, c, x + first * dim, rt, n, groups.ep, slots.data());
  // Per row, the experts' outputs in expert-index order (the reference's
  // loop over experts).
  std::fill_n(routed_out, n * dim, 0.0f);
  std::vector<int64_t> order(topk);
  for (int64_t r = 0; r < n; ++r) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return rt.experts[r * topk + a] < rt.experts[r * topk + b]; });
    for (int64_t j : order)
      for (int64_t d = 0; d < dim; ++d) routed_out[r * dim + d] += slots[(r * topk + j) * dim + d];
  }
  // The shared expert for every row, this rank's share of its features.
  PhaseTimer::Scope shared_time(Phase::kSharedExpert);
  Collectives* tp = groups.tp && groups.tp->size() > 1 ? groups.tp : nullptr;
  expert_forward(k, w.shared, c.swiglu_limit, x, rows, nullptr, shared_out, tp);
}

}  // namespace dsv4
