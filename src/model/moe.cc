#include "model/moe.h"

#include <algorithm>
#include <memory>
#include <cmath>

#include "base/check.h"
#include "base/phase_timer.h"
#include "base/scratch.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "model/expert_dispatch.h"
#include "ops/topk.h"

namespace dsv4 {
namespace {

// SwiGLU goes in pieces of a hidden row.
constexpr int64_t kSwigluPiece = 512;

// An expert over its rows x [n, dim] -> out [n, w2.out]; row weights (may
// be null) scale the hidden activations before w2, as the reference does.
// With a group, w1/w3 hold hidden features [rank * w1.out, +w1.out) of each
// row (tensor parallelism): whole hidden rows are gathered before w2.
struct ExpertCall {
  const ExpertWeights* e = nullptr;
  const float* x = nullptr;
  int64_t n = 0;
  const float* row_weights = nullptr;
  float* out = nullptr;
  Collectives* group = nullptr;
};

// Every call's expert in few pool jobs: w1 and w3 of all, SwiGLU (in their
// job at decode), then w2 of all (a decode step's routed and shared experts
// together: each job is a wake-up and a join of every worker).
void experts_forward(const kernels::Kernels& k, float limit, const std::vector<ExpertCall>& calls) {
  std::vector<int64_t> first_row{0};  // of each call in the hidden buffers
  for (const ExpertCall& c : calls) first_row.push_back(first_row.back() + c.n * c.e->w1.out);
  ScratchVector<float> gate(first_row.back()), up(first_row.back());
  // Row r, features [j0, j1) of call i: gate <- SwiGLU(gate, up), weighted.
  auto swiglu = [&](size_t i, int64_t r, int64_t j0, int64_t j1) {
    const ExpertCall& c = calls[i];
    const int64_t inter = c.e->w1.out;
    const int64_t width = inter * (c.group ? c.group->size() : 1), first = c.group ? c.group->rank() * inter : 0;
    float* g = gate.data() + first_row[i] + r * inter;
    float* u = up.data() + first_row[i] + r * inter;
    if (limit > 0)
      for (int64_t j = j0; j < j1; ++j) {
        u[j] = std::clamp(u[j], -limit, limit);
        g[j] = std::min(g[j], limit);
      }
    // Where the element sits in the whole [n, width] tensor decides its rounding.
    k.silu(g + j0, j1 - j0, r * width + first + j0, c.n * width);
    for (int64_t j = j0; j < j1; ++j) g[j] = c.row_weights ? c.row_weights[r] * (g[j] * u[j]) : g[j] * u[j];
  };
  // A decode step's SwiGLU: each piece of a hidden row as soon as w1 and w3
  // have written it. More rows: a job of its own, a task a piece of a row.
  const bool in_product = std::all_of(calls.begin(), calls.end(),
                                      [](const ExpertCall& c) { return c.n <= kStepInProductRows; });
  std::vector<std::unique_ptr<WhenPiecesWritten>> swiglu_when;
  std::vector<LinearProduct> products;
  for (size_t i = 0; i < calls.size(); ++i) {
    const ExpertCall& c = calls[i];
    const WrittenFn* written = nullptr;
    if (in_product) {
      swiglu_when.push_back(std::make_unique<WhenPiecesWritten>(
          c.n, c.e->w1.out, kSwigluPiece, 2, [&, i](int64_t r, int64_t j0, int64_t j1) { swiglu(i, r, j0, j1); }));
      written = swiglu_when.back()->written();
    }
    products.push_back({&c.e->w1, c.x, c.n, gate.data() + first_row[i], written});
    products.push_back({&c.e->w3, c.x, c.n, up.data() + first_row[i], written});
  }
  linear_forward_all(k, products);
  if (!in_product) {
    std::vector<int64_t> row_of{0};  // rows of all calls, in one numbering
    int64_t widest = 0;
    for (const ExpertCall& c : calls) {
      row_of.push_back(row_of.back() + c.n);
      widest = std::max(widest, c.e->w1.out);
    }
    parallel_for_pieces(row_of.back(), widest, kSwigluPiece, 1, [&](int64_t at, int64_t j0, int64_t j1) {
      const size_t i = std::upper_bound(row_of.begin(), row_of.end(), at) - row_of.begin() - 1;
      if (j0 < calls[i].e->w1.out) swiglu(i, at - row_of[i], j0, std::min(j1, calls[i].e->w1.out));
    });
  }
  std::vector<ScratchVector<float>> whole(calls.size());  // gathered hidden rows
  products.clear();
  for (size_t i = 0; i < calls.size(); ++i) {
    const ExpertCall& c = calls[i];
    const float* hidden = gate.data() + first_row[i];
    if (c.group) {
      const int64_t inter = c.e->w1.out;
      whole[i].resize(c.n * inter * c.group->size());
      gather_columns(c.group, TokenSplit::of(c.n, c.group), hidden, inter, whole[i].data());
      hidden = whole[i].data();
    }
    products.push_back({&c.e->w2, hidden, c.n, c.out});
  }
  linear_forward_all(k, products);
}

}  // namespace

Routing route_tokens(const kernels::Kernels& k, const MoEWeights& w, const ModelConfig& c, const float* x,
                     const int32_t* token_ids, int64_t rows, const ReferenceRows& rr) {
  const int E = c.n_routed_experts, topk = c.n_activated_experts;
  Routing rt;
  rt.experts.resize(rows * topk);
  rt.weights.resize(rows * topk);
  ScratchVector<float> logits(rows * E);
  linear_forward(k, w.gate, x, rows, logits.data());
  // A task a row: scoring and ranking all experts of a row is microseconds.
  parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
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
  });
  return rt;
}

void moe_forward(const kernels::Kernels& k, const MoEWeights& w, const ModelConfig& c, const float* x,
                 const int32_t* token_ids, int64_t rows, const ReferenceRows& rr, const TokenSplit& split,
                 const MoeGroups& groups, float* shared_out, float* routed_out) {
  const int64_t dim = c.dim, topk = c.n_activated_experts;
  // Routed experts for this rank's block of rows.
  const int64_t first = split.begin(), n = split.count();
  PhaseTimer::Scope experts_time(Phase::kExperts);
  Routing rt = route_tokens(k, w, c, x + first * dim, token_ids + first, n, rr.slice(first, n));
  const ExpertSlots slots{rt.experts.data(), rt.weights.data(), n, static_cast<int>(topk), c.n_routed_experts};
  SlotOutputs slot_out;
  // The shared expert, for every row (this rank's share of its features),
  // runs in the routed experts' jobs: its own would be three more a layer.
  Collectives* tp = groups.tp && groups.tp->size() > 1 ? groups.tp : nullptr;
  const ExpertCall shared{&w.shared, x, rows, nullptr, shared_out, tp};
  run_expert_slots(
      slots, x + first * dim, dim, groups.ep,
      [&](const std::vector<ExpertRows>& experts) {
        std::vector<ExpertCall> calls;
        for (const ExpertRows& e : experts) calls.push_back({&w.experts[e.expert], e.x, e.n, e.row_weights, e.y});
        calls.push_back(shared);
        experts_forward(k, c.swiglu_limit, calls);
      },
      &slot_out);
  sum_slots_in_expert_order(slots, slot_out, dim, routed_out);
}

}  // namespace dsv4
