// One rank's part of every engine step: its share of the model, its copy of
// its data-parallel group's pages, and its tensor-parallel group. Each rank
// runs its group's chunks of the plan; the group's first rank hands back
// what sampling needs.
#pragma once

#include "base/status.h"
#include "dist/communicator.h"
#include "kv/page_store.h"
#include "model/serving_model.h"
#include "runtime/step_plan.h"

namespace dsv4 {

class RankWorker {
 public:
  // tp: null or the rank's tensor-parallel group (its vocabulary slice for
  // greedy decoding).
  RankWorker(const ServingModel* model, PageStore* store, Communicator* tp, int group)
      : model_(model), store_(store), tp_(tp), group_(group) {}

  // A group without chunks still steps with the others (the routed experts
  // span the groups) but runs no attention and writes no page. The result
  // is the group's logit rows (or drafting jobs) in plan order on its first
  // rank, empty on the others.
  StatusOr<GroupResult> execute(const StepPlan& plan);

  int group() const { return group_; }
  bool leader() const { return !tp_ || tp_->rank() == 0; }
  const ServingModel& model() const { return *model_; }

 private:
  StatusOr<GroupResult> forward(const StepPlan& plan);
  StatusOr<GroupResult> draft(const StepPlan& plan);
  StatusOr<GroupResult> draft_dspark(const StepPlan& plan);
  bool argmax_only(const StepPlan& plan) const;
  // Per logit row: the argmax over the vocabulary (exchanging slices' best
  // under tensor parallelism) or the whole row.
  GroupResult logit_results(const ForwardOutput& out, int64_t rows, bool argmax_only) const;

  const ServingModel* model_;
  PageStore* store_;
  Communicator* tp_;
  int group_;
  // The last forward's streams [rows, hc, dim] when its plan kept them, and
  // where each plan chunk's rows start in them (-1: another group's).
  std::vector<float> hidden_;
  std::vector<int64_t> hidden_row_begin_;
  // The last forward's DSpark taps [rows, taps * dim] (rows as hidden_).
  std::vector<float> taps_;
  // The logits' buffer, kept from step to step: a decode row of a 129K
  // vocabulary is 0.25-0.5 MiB, which allocated afresh was zeroed (and its
  // pages faulted in) by the rank's thread every step: most of the head's
  // serial time in bench --simulate (0.2 of 0.27 ms a token at Flash
  // shapes, TP2).
  std::vector<float> logits_;
};

}  // namespace dsv4
