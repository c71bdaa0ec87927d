// Steps on ranks reached only through a Communicator world: one rank per
// MPI process (possibly on many machines), rank 0 driving. Every rank loads
// its share of the model and holds its group's pages; each step rank 0
// broadcasts the plan as bytes, every rank runs its group's chunks, and the
// groups' first ranks send what sampling needs back to rank 0. Rank 0 is
// this executor; every other rank runs follow_steps.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "dist/communicator.h"
#include "dist/topology.h"
#include "runtime/local_executor.h"
#include "runtime/rank_worker.h"
#include "runtime/step_executor.h"

namespace dsv4 {

struct DistributedOptions {
  std::string model_dir;
  ModelOptions model;
  ParallelOptions parallel;
  KvCacheOptions cache;  // rank 0's budget is every rank's (one copy of its group's pages each)
  // A step taking longer than this means a rank is gone: healthy() turns false.
  int step_timeout_ms = 60000;
  // Called by follow_steps once this rank's weights are in memory and
  // model_dir is read no more (a temporary checkpoint can go then).
  std::function<void()> on_loaded;
};

// What every rank sets up, collectively (load failures anywhere fail all).
struct RankSetup {
  Topology topology;
  RankGroups groups;
  std::unique_ptr<ServingModel> model;    // DeepSeek-V4 or V4.1 (exact, tp 1)
  std::unique_ptr<KvCacheManager> cache;  // this rank's group's pages
  int64_t cache_budget = 0;               // rank 0's, the same on every rank
  std::unique_ptr<RankWorker> worker;

  static StatusOr<RankSetup> create(Communicator& world, const DistributedOptions& options);
};

class DistributedExecutor : public StepExecutor {
 public:
  // On rank 0, while every other rank calls follow_steps with the same options.
  static StatusOr<std::unique_ptr<DistributedExecutor>> create(Communicator* world, const DistributedOptions& options);
  ~DistributedExecutor() override;  // tells the followers to stop

  const ModelConfig& config() const override { return setup_.model->config(); }
  int num_groups() const override { return setup_.topology.dp; }
  KvCacheManager* cache(int group) override { return group == 0 ? setup_.cache.get() : others_[group - 1].get(); }
  StatusOr<std::vector<SampledLogits>> run(const StepPlan& plan) override;
  std::string describe() const override { return setup_.topology.describe() + " over processes"; }
  bool healthy() const override;
  Status heartbeat() override;

 private:
  DistributedExecutor(Communicator* world, RankSetup setup, int timeout_ms)
      : world_(world), setup_(std::move(setup)), timeout_ms_(timeout_ms) {}

  Communicator* world_;
  RankSetup setup_;
  std::vector<std::unique_ptr<KvCacheManager>> others_;  // the other groups' page ids (their pages live elsewhere)
  int timeout_ms_;
  std::atomic<int64_t> step_started_ms_{0};  // 0: no step in progress
};

// Every rank but 0: set up, then run rank 0's steps until it stops.
Status follow_steps(Communicator* world, const DistributedOptions& options);

}  // namespace dsv4
