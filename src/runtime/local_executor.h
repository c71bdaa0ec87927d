// Steps on ranks that are threads of this process: one rank over a loaded
// model (no threads), or tp x dp ranks, each loading only its share of the
// checkpoint and holding its copy of its group's pages, stepping in
// lockstep on persistent threads.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dist/memory_binding.h"
#include "dist/numa_placement.h"
#include "dist/topology.h"
#include "runtime/rank_model.h"
#include "runtime/rank_worker.h"
#include "runtime/step_executor.h"

namespace dsv4 {

struct ParallelOptions {
  TopologyOptions topology;
  FlashCommOptions flashcomm;
  // By rank, when the ranks are pinned to NUMA nodes (numa_placement.h):
  // each runs on its own pool of its node's cores and loads its share from
  // there. Empty: every rank on the process's pool.
  std::vector<RankPlacement> placement;
  // Where placed ranks' weights and KV pages are bound to their nodes (not
  // owned); null: hwloc, on this machine.
  MemoryBinding* memory = nullptr;
  // Placed ranks' pools; null: rank_pool's, a thread pinned to each core.
  // The machine simulator gives each rank a simulated pool (not pinned).
  std::function<std::unique_ptr<ThreadPool>(int rank)> rank_pools;
};

class LocalExecutor : public StepExecutor {
 public:
  // One rank over `model` (not owned).
  static StatusOr<std::unique_ptr<LocalExecutor>> single(const ServingModel* model, const KvCacheOptions& cache);
  // One rank over `model`, which the executor keeps.
  static StatusOr<std::unique_ptr<LocalExecutor>> own(std::unique_ptr<ServingModel> model, const KvCacheOptions& cache);
  // tp x dp ranks as threads, each loading its share of the checkpoint in
  // `dir` (either family); cache
  // sizes each rank's copy of its group's pages.
  static StatusOr<std::unique_ptr<LocalExecutor>> create(const std::string& dir, const ModelOptions& model,
                                                         const ParallelOptions& parallel, const KvCacheOptions& cache);
  ~LocalExecutor() override;

  const ModelConfig& config() const override { return config_; }
  int num_groups() const override { return static_cast<int>(caches_.size()); }
  KvCacheManager* cache(int group) override { return caches_[group].get(); }
  StatusOr<std::vector<SampledLogits>> run(const StepPlan& plan) override;
  std::string describe() const override { return topology_.describe(); }

  const Topology& topology() const { return topology_; }
  // Rank r's model (executors from create() over a DeepSeek-V4 checkpoint).
  const DeepseekV4& model(int rank) const { return *ranks_.at(rank).share.v4; }
  // Bytes rank r's weights keep resident (create()'s ranks, either family).
  int64_t resident_bytes(int rank) const { return ranks_.at(rank).share.resident_bytes(); }
  // Traffic each rank sent over its groups so far.
  std::vector<Communicator::Traffic> traffic() const;

 private:
  struct Rank {
    RankModel share;
    std::unique_ptr<Communicator> world;
    RankGroups groups;
    std::unique_ptr<ThreadPool> pool;  // its node's cores, when placed
    int first_cpu = -1;  // -1: not pinned
  };
  LocalExecutor() = default;
  void start_threads();
  void rank_loop(int rank);
  // Runs fn on rank r's cores with its pool (a thread pinned there), or
  // here when the ranks are not placed.
  void on_rank(int r, const std::function<void()>& fn);
  // Binds placed rank r's weights and its KV pages to its node.
  void bind_to_node(const ParallelOptions& p, int r, const PageStore* pages);

  ModelConfig config_;
  std::unique_ptr<ServingModel> owned_;  // own()'s model
  Topology topology_;
  std::vector<Rank> ranks_;
  std::vector<std::unique_ptr<KvCacheManager>> caches_;  // per group, one page store per TP rank
  std::vector<std::unique_ptr<RankWorker>> workers_;
  std::unique_ptr<MemoryBinding> hwloc_binding_;  // when ParallelOptions.memory is null

  // Lockstep: the driver publishes a plan and a generation; each rank runs
  // it and reports.
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const StepPlan* plan_ = nullptr;
  int64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  std::vector<StatusOr<GroupResult>> results_;
};

}  // namespace dsv4
