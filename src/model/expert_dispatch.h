// Routed experts over an expert-parallel group, for either model family:
// every (row, choice) slot travels to the rank holding its expert (an
// all-to-all; a row goes once to each rank its slots choose), runs there
// with the other slots of that expert, and its output comes back (a second
// all-to-all); then each row adds its slots in
// expert-index order, the reference's loop over experts. An expert's rows
// arrive in (source rank, slot) order, the order one rank holding every
// expert would stack them, so the bits are that rank's.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/scratch.h"
#include "model/collectives.h"

namespace dsv4 {

// Runs expert e over x [n, dim], each row scaled by row_weights[i] before
// the down projection as the reference does, into y [n, dim].
using RunExpert = std::function<void(int e, const float* x, int64_t n, const float* row_weights, float* y)>;

// One expert's rows among the slots a rank received.
struct ExpertRows {
  int expert = 0;
  const float* x = nullptr;            // [n, dim]
  int64_t n = 0;
  const float* row_weights = nullptr;  // [n]
  float* y = nullptr;                  // [n, dim]
};
// Runs every listed expert over its rows, as RunExpert does each; given
// all at once so that their products can share pool jobs.
using RunExperts = std::function<void(const std::vector<ExpertRows>& experts)>;

// RunExperts from a RunExpert: with at least two experts per pool thread,
// experts run whole, one per thread (one pool job instead of several per
// expert); else one after another, each splitting over the pool. run must
// give the same numbers either way.
RunExperts one_expert_at_a_time(RunExpert run);

struct ExpertSlots {
  const int32_t* experts = nullptr;  // [rows, k]: the chosen experts of each row
  const float* weights = nullptr;    // [rows, k]: their weights
  int64_t rows = 0;
  int k = 0;
  int num_experts = 0;  // split over the group's ranks in contiguous blocks (ExpertShard)
};

// Each slot's expert output, a row of `dim` values where it was left: where
// the expert wrote it, or where the second all-to-all received it. (Copied
// into slot order, every slot's row went once more through the rank's
// thread, serially: 1.5 MiB a layer at decode batch 16.)
struct SlotOutputs {
  ScratchVector<float> rows;          // holds them
  std::vector<const float*> of_slot;  // slot i's row
};

// x [rows, dim] -> each slot's expert output. ep: null or one rank when
// this rank holds every expert; otherwise every rank of the group calls
// this together. run gets every expert this rank holds that has slots, in
// expert order.
void run_expert_slots(const ExpertSlots& slots, const float* x, int64_t dim, Collectives* ep, const RunExperts& run,
                      SlotOutputs* outputs);

// out [rows, dim] = for each row, its slots' outputs added in expert-index
// order, starting from zero.
void sum_slots_in_expert_order(const ExpertSlots& slots, const SlotOutputs& outputs, int64_t dim, float* out);

}  // namespace dsv4
